/* What src/train shares about phx_metrics (include/phalanx/metrics.h). */
#ifndef PX_TRAIN_METRICS_IMPL_H
#define PX_TRAIN_METRICS_IMPL_H

/* 1 when k is a key phx_metrics accepts: 1-64 letters, digits, '_', '.'
 * or '-', not starting with a digit ("time" aside). */
int px_metrics_key_ok(const char *k);

#endif
