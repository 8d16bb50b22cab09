# plugins/precision — the three precision policies (fp32, fp16, bf16), each
# a data-only phx_precision_v1 behind the plugin descriptor.
pkglib_LTLIBRARIES += plugins/precision/phx-precision-fp32.la \
	plugins/precision/phx-precision-fp16.la plugins/precision/phx-precision-bf16.la
plugins_precision_phx_precision_fp32_la_SOURCES = plugins/precision/fp32.c plugins/precision/policy.h
plugins_precision_phx_precision_fp32_la_LDFLAGS = $(plugin_ldflags)
plugins_precision_phx_precision_fp16_la_SOURCES = plugins/precision/fp16.c plugins/precision/policy.h
plugins_precision_phx_precision_fp16_la_LDFLAGS = $(plugin_ldflags)
plugins_precision_phx_precision_bf16_la_SOURCES = plugins/precision/bf16.c plugins/precision/policy.h
plugins_precision_phx_precision_bf16_la_LDFLAGS = $(plugin_ldflags)
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/precision/.libs
