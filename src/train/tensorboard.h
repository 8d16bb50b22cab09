/* TensorBoard event files, written without protobuf or TensorFlow: what
 * phx_metrics_tensorboard (include/phalanx/metrics.h) writes.
 *
 * A file is a sequence of TFRecords, each
 *
 *   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
 *
 * (little-endian), whose data is one tensorflow.Event protobuf: the first
 * carries file_version "brain.Event:2", every later one a Summary of
 * simple_value scalars at one step.
 * Records are appended with one write(2) each on an O_APPEND descriptor,
 * so a crash loses at most the record being written, never an earlier one.
 * Nothing is allocated after open. */
#ifndef PX_TRAIN_TENSORBOARD_H
#define PX_TRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/error.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes,
 * continuing from crc (0 to start): crc32c("123456789") = 0xE3069283. */
uint32_t px_crc32c(uint32_t crc, const void *p, size_t n);

/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t px_crc32c_mask(uint32_t crc);

/* Frames n bytes of data as one TFRecord into out (n + 16 bytes).
 * Returns the bytes written. */
size_t px_tfrecord_frame(uint8_t *out, const void *data, size_t n);

typedef struct px_tb px_tb;

/* Creates dir when missing (one level, mode 0777 less the umask) and in it
 * events.out.tfevents.<seconds>.<hostname>.<pid>[.<n>] (PyTorch's
 * SummaryWriter's name), and writes the file_version record into *out.
 * PHX_EIO (*out NULL) naming fn, the path and the system's reason. */
phx_status px_tb_open(const char *dir, const char *fn, px_tb **out);

/* Closes the file; NULL does nothing. */
void px_tb_close(px_tb *t);

/* The file's path (for messages and tests). */
const char *px_tb_path(const px_tb *t);

/* Appends one Event at wall_time (seconds since the Unix epoch) and step
 * holding n scalars: tag i is tags[i] (taglen[i] bytes), value values[i]
 * (a float32, as TensorBoard stores them). PHX_EIO naming the file when
 * the write fails; PHX_EINVAL when the record would pass the writer's
 * 16 KiB buffer. */
phx_status px_tb_scalars(px_tb *t, double wall_time, int64_t step, int n, const char *const *tags, const size_t *taglen,
                         const float *values);

/* Appends the hparams plugin's session-start record at wall_time: the n
 * hyperparameters, hyperparameter i named names[i] with the string
 * strs[i], or the number nums[i] where strs[i] is NULL. */
phx_status px_tb_hparams(px_tb *t, double wall_time, int n, const char *const *names, const char *const *strs,
                         const double *nums);

#endif
