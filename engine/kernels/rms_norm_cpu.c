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
#include <stdint.h>
#include <string.h>

#define LANES 16

typedef float v16 __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

/* 16 values from p[i..i+15] as float32. */
static inline v16 load16(const void *p, int64_t i, int bf16) {
    v16 v;
    if (!bf16) {
        memcpy(&v, (const float *)p + i, sizeof v);
        return v;
    }
    v16h half;
    memcpy(&half, (const uint16_t *)p + i, sizeof half);
    const v16u bits = __builtin_convertvector(half, v16u) << 16; /* a bfloat16 is the top half of its float32 */
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* v rounded to the dtype (bfloat16: to nearest, ties to even, every NaN 0x7fc0, as torch rounds),
 * stored at p[i..i+15] unless p is NULL; returns the rounded values as float32. */
static inline v16 round16(void *p, int64_t i, int bf16, v16 v) {
    if (!bf16) {
        if (p) memcpy((float *)p + i, &v, sizeof v);
        return v;
    }
    v16u bits;
    memcpy(&bits, &v, sizeof bits);
    const v16u nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const v16u top = (((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) & ~nan) | (0x7fc0u & nan);
    if (p) {
        const v16h half = __builtin_convertvector(top, v16h);
        memcpy((uint16_t *)p + i, &half, sizeof half);
    }
    const v16u back = top << 16;
    memcpy(&v, &back, sizeof v);
    return v;
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
