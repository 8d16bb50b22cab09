/* LayerNorm and loss kernels against float64 references and central
 * finite differences of float64 forwards: layernorm (affine or not, short
 * rows, a large mean offset, f16), mse (sum, mean), cross entropy (huge
 * logits stay finite), nll, bad labels changing nothing; softmax and
 * layernorm, forward and backward, cut into parts across threads give
 * the bits of one thread. */
#include "config.h"
#include <string.h>
#include "t/core-util.h"

#define MAXR 16
#define MAXC 1000

/* float64 LayerNorm of one row (w, b may be NULL) */
static void ln_row(int cols, const double *x, const double *w, const double *b, double eps, double *y)
{
    double m = 0, v = 0;
    for (int j = 0; j < cols; j++) m += x[j];
    m /= cols;
    for (int j = 0; j < cols; j++) v += (x[j] - m) * (x[j] - m);
    v /= cols;
    double rs = 1 / sqrt(v + eps);
    for (int j = 0; j < cols; j++) y[j] = (x[j] - m) * rs * (w ? w[j] : 1) + (b ? b[j] : 0);
}

/* L = sum_j r_j y_j for a row */
static double ln_loss(int cols, const double *x, const double *w, const double *b, double eps, const double *r)
{
    double y[MAXC], s = 0;
    ln_row(cols, x, w, b, eps, y);
    for (int j = 0; j < cols; j++) s += r[j] * y[j];
    return s;
}

static int ln_case(const phx_kernels_v1 *K, int rows, int cols, int affine, float offset, phx_dtype dt)
{
    static float xf[MAXR * MAXC], wf[MAXC], bf[MAXC], dyf[MAXR * MAXC], dxf[MAXR * MAXC], yf[MAXR * MAXC];
    static float mean[MAXR], rstd[MAXR], dw[MAXC], db[MAXC];
    static uint16_t xh[MAXR * MAXC], yh[MAXR * MAXC], dyh[MAXR * MAXC], dxh[MAXR * MAXC];
    static double xd[MAXC], wd[MAXC], bd[MAXC], rd[MAXC], yref[MAXR * MAXC], dxref[MAXR * MAXC], dwref[MAXC],
        dbref[MAXC];
    float eps = 1e-5f;
    for (int i = 0; i < rows * cols; i++) xf[i] = offset + cu_frand(-2, 2), dyf[i] = cu_frand(-1, 1);
    for (int j = 0; j < cols; j++)
        wf[j] = cu_frand(0.5f, 1.5f), bf[j] = cu_frand(-0.5f, 0.5f), dw[j] = 0.25f, db[j] = -0.5f;
    int half = dt != PHX_F32;
    if (half)
        for (int i = 0; i < rows * cols; i++)
            cu_set(xh, dt, i, xf[i]), cu_set(dyh, dt, i, dyf[i]), xf[i] = (float)cu_get(xh, dt, i),
                                                                  dyf[i] = (float)cu_get(dyh, dt, i);
    const float *w = affine ? wf : NULL, *b = affine ? bf : NULL;
    phx_status st = K->layernorm_forward(0, rows, cols, eps, half ? (void *)xh : (void *)xf, w, b,
                                         half ? (void *)yh : (void *)yf, mean, rstd, dt);
    st |= K->layernorm_backward(0, rows, cols, half ? (void *)xh : (void *)xf, w, mean, rstd,
                                half ? (void *)dyh : (void *)dyf, half ? (void *)dxh : (void *)dxf, affine ? dw : NULL,
                                affine ? db : NULL, dt);
    for (int j = 0; j < cols; j++) wd[j] = wf[j], bd[j] = bf[j], dwref[j] = 0.25, dbref[j] = -0.5;
    double wstat = 0, wfd = 0;
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < cols; j++) xd[j] = xf[r * cols + j], rd[j] = dyf[r * cols + j];
        ln_row(cols, xd, affine ? wd : NULL, affine ? bd : NULL, eps, yref + r * cols);
        double m = 0, v = 0;
        for (int j = 0; j < cols; j++) m += xd[j];
        m /= cols;
        for (int j = 0; j < cols; j++) v += (xd[j] - m) * (xd[j] - m);
        double rs = 1 / sqrt(v / cols + eps);
        wstat = fmax(wstat, fmax(fabs(mean[r] - m) / (1e-6 * (fabs(m) + 1)), fabs(rstd[r] - rs) / (1e-5 * rs)));
        /* dx by central differences of the float64 loss */
        for (int j = 0; j < cols; j++) {
            double keep = xd[j], h = 1e-5 * fmax(1, fabs(keep));
            xd[j] = keep + h;
            double lp = ln_loss(cols, xd, affine ? wd : NULL, affine ? bd : NULL, eps, rd);
            xd[j] = keep - h;
            double lm = ln_loss(cols, xd, affine ? wd : NULL, affine ? bd : NULL, eps, rd);
            xd[j] = keep;
            dxref[r * cols + j] = (lp - lm) / (2 * h);
        }
        /* dw, db exactly: sum_rows dy xhat, sum_rows dy */
        for (int j = 0; j < cols; j++) dwref[j] += rd[j] * (xd[j] - m) * rs, dbref[j] += rd[j];
    }
    double scale = 0;
    for (int i = 0; i < rows * cols; i++) scale = fmax(scale, fabs(dxref[i]));
    double tol = half ? 4 * cu_eps(dt) : 2e-5;
    /* backward gets the mean rounded to f32: xhat carries its relative
     * error u |mean| / std (std ~ 1.15 here), inherent to the interface */
    double cond = 2 * ldexp(1, -24) * fabs((double)offset);
    double wy = cu_worst(half ? (void *)yh : (void *)yf, dt, yref, rows * cols, tol, tol, NULL);
    wfd = cu_worst(half ? (void *)dxh : (void *)dxf, dt, dxref, rows * cols, tol, (tol + cond) * scale, NULL);
    double wdw = affine ? cu_worst(dw, PHX_F32, dwref, cols, 1e-5, (1e-5 + cond) * rows, NULL) : 0;
    double wdb = affine ? cu_worst(db, PHX_F32, dbref, cols, 1e-5, 1e-5 * rows, NULL) : 0;
    return ok(st == PHX_OK && wy <= 1 && wfd <= 1 && wdw <= 1 && wdb <= 1 && wstat <= 1,
              "layernorm %dx%d%s offset %g %s: y, mean/rstd vs float64, dx vs finite differences, dw/db accumulate "
              "(worst %.2g %.2g %.2g %.2g %.2g)",
              rows, cols, affine ? " affine" : "", (double)offset, phx_dtype_name(dt), wy, wstat, wfd, wdw, wdb);
}

static double xent_loss(int rows, int classes, const double *x, const int64_t *lab, int log_probs)
{
    double s = 0;
    for (int r = 0; r < rows; r++) {
        const double *xr = x + r * classes;
        if (log_probs) {
            s -= xr[lab[r]];
            continue;
        }
        double m = xr[0], z = 0;
        for (int j = 1; j < classes; j++) m = fmax(m, xr[j]);
        for (int j = 0; j < classes; j++) z += exp(xr[j] - m);
        s += m + log(z) - xr[lab[r]];
    }
    return s / rows;
}

/* Softmax over rows in parts on 2 threads (rows > cols, so the causal
 * mask of a later part depends on its first row's index) against 1
 * thread: forward and backward, plain and log, causal or not, in dt;
 * bitwise equal. */
static void softmax_threads(const phx_kernels_v1 *K, phx_dtype dt)
{
    enum { SR = 1000, SC = 64 };
    size_t es = phx_dtype_size(dt), n = (size_t)SR * SC;
    float *xf = malloc(n * sizeof *xf);
    char *x = malloc(n * es), *dy = malloc(n * es), *y[2], *dx[2];
    for (int t = 0; t < 2; t++) y[t] = malloc(n * es), dx[t] = malloc(n * es);
    for (size_t i = 0; i < n; i++) xf[i] = cu_frand(-4, 4);
    K->cast(0, x, dt, xf, PHX_F32, (int64_t)n);
    for (size_t i = 0; i < n; i++) xf[i] = cu_frand(-1, 1);
    K->cast(0, dy, dt, xf, PHX_F32, (int64_t)n);
    int same = 1, cases = 0;
    phx_status st = PHX_OK;
    for (int causal = 0; causal < 2; causal++)
        for (int lg = 0; lg < 2; lg++) {
            for (int t = 0; t < 2 && st == PHX_OK; t++) {
                phx_set_num_threads(t + 1);
                st = K->softmax_forward(0, SR, SC, 0.5f, causal, lg, x, y[t], dt);
                if (st == PHX_OK) st = K->softmax_backward(0, SR, SC, 0.5f, causal, lg, y[t], dy, dx[t], dt);
            }
            same &= st == PHX_OK && memcmp(y[0], y[1], n * es) == 0 && memcmp(dx[0], dx[1], n * es) == 0;
            cases++;
        }
    phx_set_num_threads(1);
    ok(same && cases == 4,
       "softmax %s (%d x %d) on 2 threads: forward and backward, plain and log, causal or not, "
       "bitwise those of 1 thread",
       phx_dtype_name(dt), SR, SC);
    free(xf), free(x), free(dy);
    for (int t = 0; t < 2; t++) free(y[t]), free(dx[t]);
}

/* LayerNorm over rows in parts on 2 threads against 1 thread: y, mean,
 * rstd, dx, and dw, db (sums over every row, added in row order either
 * way), in dt; bitwise equal. */
static void layernorm_threads(const phx_kernels_v1 *K, phx_dtype dt)
{
    enum { LR = 1000, LC = 64 };
    size_t es = phx_dtype_size(dt), n = (size_t)LR * LC;
    float *xf = malloc(n * sizeof *xf), w[LC], b[LC];
    char *x = malloc(n * es), *dy = malloc(n * es), *y[2], *dx[2];
    float *mean[2], *rstd[2], *dw[2], *db[2];
    for (size_t i = 0; i < n; i++) xf[i] = cu_frand(-3, 3);
    K->cast(0, x, dt, xf, PHX_F32, (int64_t)n);
    for (size_t i = 0; i < n; i++) xf[i] = cu_frand(-1, 1);
    K->cast(0, dy, dt, xf, PHX_F32, (int64_t)n);
    for (int c = 0; c < LC; c++) w[c] = cu_frand(0.5f, 1.5f), b[c] = cu_frand(-1, 1);
    phx_status st = PHX_OK;
    for (int t = 0; t < 2; t++) {
        y[t] = malloc(n * es), dx[t] = malloc(n * es);
        mean[t] = malloc(LR * sizeof(float)), rstd[t] = malloc(LR * sizeof(float));
        dw[t] = calloc(LC, sizeof(float)), db[t] = calloc(LC, sizeof(float));
        phx_set_num_threads(t + 1);
        if (st == PHX_OK) st = K->layernorm_forward(0, LR, LC, 1e-5f, x, w, b, y[t], mean[t], rstd[t], dt);
        if (st == PHX_OK) st = K->layernorm_backward(0, LR, LC, x, w, mean[t], rstd[t], dy, dx[t], dw[t], db[t], dt);
    }
    phx_set_num_threads(1);
    int same = st == PHX_OK && !memcmp(y[0], y[1], n * es) && !memcmp(dx[0], dx[1], n * es) &&
        !memcmp(mean[0], mean[1], LR * sizeof(float)) && !memcmp(rstd[0], rstd[1], LR * sizeof(float)) &&
        !memcmp(dw[0], dw[1], sizeof w) && !memcmp(db[0], db[1], sizeof b);
    ok(same, "layernorm %s (%d x %d) on 2 threads: y, statistics, dx, dw and db bitwise those of 1 thread",
       phx_dtype_name(dt), LR, LC);
    free(xf), free(x), free(dy);
    for (int t = 0; t < 2; t++) free(y[t]), free(dx[t]), free(mean[t]), free(rstd[t]), free(dw[t]), free(db[t]);
}

int main(void)
{
    plan(6 + 4 + 6 + 5 + 4);
    layernorm_threads(cu_kernels(), PHX_F32);
    layernorm_threads(cu_kernels(), PHX_BF16);
    softmax_threads(cu_kernels(), PHX_F32);
    softmax_threads(cu_kernels(), PHX_BF16);
    const phx_kernels_v1 *K = cu_kernels();
    /* 1-6: layernorm */
    ln_case(K, 7, 64, 1, 0.0f, PHX_F32);
    ln_case(K, 5, 5, 0, 0.0f, PHX_F32);
    ln_case(K, 3, 1000, 1, 0.0f, PHX_F32);
    ln_case(K, 4, 37, 1, 1000.0f, PHX_F32);
    ln_case(K, 6, 48, 1, 0.0f, PHX_F16);
    ln_case(K, 6, 48, 0, 0.0f, PHX_BF16);

    /* 7-10: mse */
    enum { NM = 37 };
    float y[NM], t[NM], g[NM], loss;
    double yd[NM], ls = 0, gref[NM];
    for (int i = 0; i < NM; i++)
        y[i] = cu_frand(-2, 2), t[i] = cu_frand(-2, 2), ls += ((double)y[i] - t[i]) * ((double)y[i] - t[i]);
    for (int mean = 0; mean < 2; mean++) {
        K->mse(0, NM, y, PHX_F32, t, mean, &loss, g);
        double lref = mean ? ls / NM : ls;
        double wfd = 0;
        for (int i = 0; i < NM; i++) {
            for (int k = 0; k < NM; k++) yd[k] = y[k];
            double h = 1e-6, lp = 0, lm = 0;
            yd[i] += h;
            for (int k = 0; k < NM; k++) lp += (yd[k] - t[k]) * (yd[k] - t[k]);
            yd[i] -= 2 * h;
            for (int k = 0; k < NM; k++) lm += (yd[k] - t[k]) * (yd[k] - t[k]);
            gref[i] = (lp - lm) / (2 * h) / (mean ? NM : 1);
        }
        wfd = cu_worst(g, PHX_F32, gref, NM, 1e-6, 1e-7, NULL);
        ok(fabs(loss - lref) <= 1e-6 * lref, "mse %s: loss %.7g vs float64 %.7g", mean ? "mean" : "sum", (double)loss,
           lref);
        ok(wfd <= 1, "mse %s: gradient vs finite differences (worst %.3g)", mean ? "mean" : "sum", wfd);
    }

    /* 11-16: cross entropy and nll */
    enum { R = 9, C = 11 };
    float x[R * C], gx[R * C];
    double xd[R * C], gr[R * C];
    int64_t lab[R];
    for (int i = 0; i < R * C; i++) x[i] = cu_frand(-3, 3);
    for (int j = 0; j < C; j++) x[4 * C + j] = 1000.0f + 10.0f * (float)j; /* would overflow a naive softmax */
    for (int r = 0; r < R; r++) lab[r] = (r * 7) % C;
    for (int lp = 0; lp < 2; lp++) {
        if (lp) /* nll takes log-probabilities: log_softmax in float64 */
            for (int r = 0; r < R; r++) {
                double m = -INFINITY, z = 0;
                for (int j = 0; j < C; j++) m = fmax(m, x[r * C + j]);
                for (int j = 0; j < C; j++) z += exp(x[r * C + j] - m);
                for (int j = 0; j < C; j++) x[r * C + j] = (float)(x[r * C + j] - m - log(z));
            }
        for (int i = 0; i < R * C; i++) xd[i] = x[i];
        int64_t badrow = 99;
        phx_status st = K->cross_entropy(0, R, C, x, PHX_F32, lab, lp, &loss, gx, &badrow);
        double lref = xent_loss(R, C, xd, lab, lp);
        for (int i = 0; i < R * C; i++) {
            double keep = xd[i], h = 1e-6;
            xd[i] = keep + h;
            double a = xent_loss(R, C, xd, lab, lp);
            xd[i] = keep - h;
            double b = xent_loss(R, C, xd, lab, lp);
            xd[i] = keep;
            gr[i] = (a - b) / (2 * h);
        }
        double w = cu_worst(gx, PHX_F32, gr, R * C, 1e-5, 1e-6, NULL);
        ok(st == PHX_OK && badrow == -1 && isfinite(loss) && fabs(loss - lref) <= 2e-6 * fabs(lref),
           "%s: loss %.7g vs float64 %.7g (row of logits ~1000 included), no bad label", lp ? "nll" : "cross_entropy",
           (double)loss, lref);
        ok(w <= 1, "%s: gradient vs finite differences (worst %.3g)", lp ? "nll" : "cross_entropy", w);
    }
    /* f16 logits */
    uint16_t xh[R * C];
    for (int i = 0; i < R * C; i++) xh[i] = phx_f32_to_f16(cu_frand(-3, 3)), xd[i] = phx_f16_to_f32(xh[i]);
    K->cross_entropy(0, R, C, xh, PHX_F16, lab, 0, &loss, gx, NULL);
    double lref = xent_loss(R, C, xd, lab, 0);
    ok(fabs(loss - lref) <= 2e-6 * fabs(lref), "cross_entropy on f16 logits: statistics in f32 (%.7g vs %.7g)",
       (double)loss, lref);
    K->cross_entropy(0, R, C, x, PHX_F32, lab, 0, &loss, NULL, NULL);
    ok(isfinite(loss), "cross_entropy without a gradient buffer computes the loss only");

    /* 17-21: bad labels change nothing */
    lab[6] = C;
    float keep_loss = 123.0f, gkeep[R * C];
    memcpy(gkeep, gx, sizeof gx);
    int64_t badrow = -1;
    is_int(K->cross_entropy(0, R, C, x, PHX_F32, lab, 0, &keep_loss, gx, &badrow), PHX_EINVAL,
           "label 11 with 11 classes: EINVAL");
    is_int(badrow, 6, "bad_label_host names row 6");
    like(phx_last_error(), "label 11 at row 6, expected 0 <= label < 11", "message names label, row and range");
    ok(keep_loss == 123.0f && memcmp(gkeep, gx, sizeof gx) == 0, "loss and gradient untouched");
    lab[6] = -1;
    is_int(K->cross_entropy(0, R, C, x, PHX_F32, lab, 1, &keep_loss, gx, NULL), PHX_EINVAL,
           "negative label in nll: EINVAL");
    return done_testing();
}
