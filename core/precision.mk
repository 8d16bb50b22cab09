# core/precision — precision policies (loaded from the plugins), the loss
# scaler, their tests, and the mixed-precision example.
libphalanx_la_SOURCES += core/precision.c core/scaler.c core/precision-impl.h
