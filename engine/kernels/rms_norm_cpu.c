/* RMSNorm with the residual add before it, on the CPU, in one call: what engine/layers/norm.rms_norm
 * does in about a dozen torch calls (twice a layer, 61 times a step of a 30-layer model).
 *
 * Built with decode_attention_cpu.c into one library by engine/attention/cpu_native.py and called
 * through ctypes; tested against the torch path in tests/engine/test_cpu_native_norm.py.
 *
 * Numbers: the torch path's roundings, in its order: the sum x + residual rounded to the dtype,
 * squares summed in float32, divided by dim, eps added, 1 / sqrt, the product rounded to the dtype,
 * then times the weight rounded to the dtype. Only the sum of squares runs in another order than
 * torch's reduction: 16 lanes, then a fixed butterfly, so a row's bits depend on that row alone,
 * never on the rows beside it or the thread count.
 *
 * Layouts: x, residual (may be NULL), summed_out (unused without a residual), normed_out [rows, dim],
 * weight [dim], all contiguous, float32 or bfloat16 (bf16), one dtype; dim a multiple of 16.
 */
#include "cpu_vectors.h"

/* 16 values from p[i..i+15] as float32. */
static inline v16 load16(const void *p, int64_t i, int bf16) {
    if (bf16) return widen16((const uint16_t *)p + i);
    v16 v;
    memcpy(&v, (const float *)p + i, sizeof v);
    return v;
}

/* v rounded to the dtype, stored at p[i..i+15] unless p is NULL; returns the rounded values as
 * float32. */
static inline v16 round16(void *p, int64_t i, int bf16, v16 v) {
    if (!bf16) {
        if (p) memcpy((float *)p + i, &v, sizeof v);
        return v;
    }
    const v16h half = to_bf16_16(v);
    if (p) memcpy((uint16_t *)p + i, &half, sizeof half);
    return widen16((const uint16_t *)&half);
}

int add_rms_norm(const void *x, const void *residual, void *summed_out, void *normed_out, const void *weight,
                 int64_t rows, int dim, int bf16, float eps, int threads) {
    if (dim <= 0 || dim % LANES) return 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (rows >= 64)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t at = r * dim;
        v16 squares = {0}; /* lane l: the squares of elements l, l + 16, l + 32, ... in order */
        for (int i = 0; i < dim; i += LANES) {
            v16 v = load16(x, at + i, bf16);
            if (residual) v = round16(summed_out, at + i, bf16, v + load16(residual, at + i, bf16));
            squares += v * v;
        }
        float lanes[LANES];
        memcpy(lanes, &squares, sizeof lanes);
        for (int width = LANES / 2; width >= 1; width /= 2)
            for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
        const float rstd = 1.0f / __builtin_sqrtf(lanes[0] / (float)dim + eps);
        const void *source = residual ? summed_out : x;
        for (int i = 0; i < dim; i += LANES) {
            const v16 normed = round16(NULL, 0, bf16, load16(source, at + i, bf16) * rstd);
            round16(normed_out, at + i, bf16, normed * load16(weight, i, bf16));
        }
    }
    return 0;
}
