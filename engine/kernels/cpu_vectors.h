/* What the CPU kernels (decode_attention_cpu.c, rms_norm_cpu.c) share: 16-lane float32 vectors
 * (GCC vector extensions) and bfloat16 as torch reads and rounds it. Written beside the sources
 * and hashed with them by engine/attention/cpu_native.py. */
#ifndef AGENTGATE_CPU_VECTORS_H
#define AGENTGATE_CPU_VECTORS_H

#include <stdint.h>
#include <string.h>

#define LANES 16

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

/* A bfloat16 is the top half of its float32: widening is exact. */
static inline float from_bf16(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline v16 widen16(const uint16_t *p) {
    v16h half;
    memcpy(&half, p, sizeof half);
    const v16u bits = __builtin_convertvector(half, v16u) << 16;
    v16 v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Rounded to nearest, ties to even, as torch's .to(torch.bfloat16); every NaN becomes torch's
 * quiet NaN, 0x7fc0. The scalar form and the 16-lane one apply the same rule. */
static inline uint16_t to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static inline v16h to_bf16_16(v16 v) {
    v16u bits;
    memcpy(&bits, &v, sizeof bits);
    const v16u nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const v16u top = (((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) & ~nan) | (0x7fc0u & nan);
    return __builtin_convertvector(top, v16h);
}

#endif
