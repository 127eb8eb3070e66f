/* Paged decode attention on the CPU: one query token per row over exactly its own context, read
 * straight from the paged KV cache (no gathered copy), scores and softmax in float32.
 *
 * Also here: RoPE and the KV-cache write of a step's tokens in one call (rotary_write_kv, at the
 * end), the other half of a layer's attention.
 *
 * Built at run time by engine/attention/cpu_native.py (cc -O2 -march=native -fopenmp) and called
 * through ctypes; the plain-torch path in engine/attention/torch.py is the reference it is tested
 * against (tests/engine/test_cpu_native_attention.py, tests/engine/test_cpu_native_rotary.py).
 *
 * Exactness: a row's result is a function of its query, its context and its length alone. Every
 * sum runs in one fixed order over 16 explicit lanes (GCC vector extensions, no -ffast-math), the
 * work is split across threads by (row, KV head) and each item is computed by one thread, so the
 * batch around a row, its index and the thread count never change its bits.
 *
 * Layouts: query [rows, heads, head_dim] float32 or bfloat16 (query_bf16; out in the same dtype,
 * rounded once from float32 as torch rounds); caches [blocks, block_size, kv_heads, head_dim]
 * in float32 or bfloat16 (cache_bf16); block_tables [rows, table_stride] int32; seq_lens [rows]
 * int32 (0: an empty row, which gets zeros); scratch [threads, group, max_seq_len] float32 (threads:
 * the OpenMP threads to use, torch's own pool: libgomp is loaded once);
 * out [rows, heads, head_dim] in the query's dtype. head_dim is a multiple of 16, at most 256.
 */
#include <omp.h>

#include "cpu_vectors.h"

#define MAX_HEAD_DIM 256
#define MAX_GROUP 64

static inline v16 load16(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store16(float *p, v16 v) { memcpy(p, &v, sizeof v); }

static inline float sum16(v16 v) {
    float lanes[LANES];
    memcpy(lanes, &v, sizeof lanes);
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
    return lanes[0];
}

/* The 16 lanes' sums of each of acc[0..15], in lane j: a butterfly of lane-wise adds, each level
 * halving the partial sums per vector (15 adds for 16 sums, against 15 per sum one by one). A
 * lane's sum depends on its own vector alone, in one fixed order. */
static inline v16 max16(v16 a, v16 b) {
    const v16i a_wins = a > b;
    return (v16)(((v16i)a & a_wins) | ((v16i)b & ~a_wins));
}

static inline float max_of_16(v16 v) {
    float top = v[0];
    for (int l = 1; l < LANES; l++) top = v[l] > top ? v[l] : top;
    return top;
}

static inline v16 fold(v16 a, v16 b, v16i lo, v16i hi) { return __builtin_shuffle(a, b, lo) + __builtin_shuffle(a, b, hi); }

static inline v16 sums_of_16(const v16 *acc) {
    /* Level masks: output lane i takes source lane (i / half) * 2 * half + i % half, and that plus half. */
    const v16i lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const v16i hi8 = lo8 + 8;
    const v16i lo4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const v16i hi4 = lo4 + 4;
    const v16i lo2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const v16i hi2 = lo2 + 2;
    const v16i lo1 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const v16i hi1 = lo1 + 1;
    v16 b[8], c[4], d[2];
    for (int v = 0; v < 8; v++) b[v] = fold(acc[2 * v], acc[2 * v + 1], lo8, hi8);
    for (int v = 0; v < 4; v++) c[v] = fold(b[2 * v], b[2 * v + 1], lo4, hi4);
    for (int v = 0; v < 2; v++) d[v] = fold(c[2 * v], c[2 * v + 1], lo2, hi2);
    return fold(d[0], d[1], lo1, hi1);
}

/* Where token t of a row (its block table) keeps kv_head's row in a cache. */
static inline int64_t cache_index(const int32_t *table, int t, int block_size, int64_t block_stride,
                                  int64_t token_stride, int kv_head, int head_dim) {
    return (int64_t)table[t / block_size] * block_stride + (int64_t)(t % block_size) * token_stride +
           (int64_t)kv_head * head_dim;
}

/* One cached key or value row (head_dim values) as float32 in out. */
static inline void load_row(const void *cache, int64_t index, int head_dim, int bf16, float *out) {
    if (!bf16) {
        memcpy(out, (const float *)cache + index, (size_t)head_dim * sizeof(float));
        return;
    }
    const uint16_t *src = (const uint16_t *)cache + index;
    for (int d = 0; d < head_dim; d += LANES) store16(out + d, widen16(src + d));
}

/* exp(x) for 16 lanes of x <= 0: Cephes' expf (a degree-6 polynomial on the remainder after
 * x = n ln2 + r), within 2 ulp of expf; lanes below -87.3 give 0. */
static inline v16 exp16(v16 x) {
    const v16i lo = x < -87.3f;
    v16 clamped = x;
    for (int l = 0; l < LANES; l++) clamped[l] = clamped[l] < -87.3f ? -87.3f : clamped[l];
    const v16 n = clamped * 1.44269504088896341f + 0.5f;
    v16i ni = __builtin_convertvector(n, v16i);
    ni += n < __builtin_convertvector(ni, v16); /* floor: a true lane is -1 */
    v16 nf = __builtin_convertvector(ni, v16);
    v16 r = clamped - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    v16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    v16i bits = (ni + 127) << 23;
    v16 scale;
    memcpy(&scale, &bits, sizeof scale);
    v16 result = p * scale;
    return (v16)((v16i)result & ~lo);
}

static inline float load_value(const void *p, int64_t i, int bf16) {
    return bf16 ? from_bf16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void store_value(void *p, int64_t i, int bf16, float f) {
    if (bf16)
        ((uint16_t *)p)[i] = to_bf16(f);
    else
        ((float *)p)[i] = f;
}

int decode_attention(const void *query, const void *k_cache, const void *v_cache, int cache_bf16,
                     const int32_t *block_tables, int64_t table_stride, const int32_t *seq_lens,
                     int rows, int num_heads, int num_kv_heads, int head_dim, int block_size,
                     float scale, float *scratch, int64_t max_seq_len, int threads, int query_bf16, void *out) {
    if (head_dim % LANES || head_dim > MAX_HEAD_DIM || num_heads % num_kv_heads) return 1;
    const int group = num_heads / num_kv_heads;
    if (group > MAX_GROUP) return 1;
    const int64_t token_stride = (int64_t)num_kv_heads * head_dim;
    const int64_t block_stride = (int64_t)block_size * token_stride;
    const int chunks = head_dim / LANES;
    int failed = 0;

#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : failed)
    for (int64_t item = 0; item < (int64_t)rows * num_kv_heads; item++) {
        const int row = (int)(item / num_kv_heads), kv_head = (int)(item % num_kv_heads);
        const int seq_len = seq_lens[row];
        const int64_t first_value = ((int64_t)row * num_heads + (int64_t)kv_head * group) * head_dim;
        if (seq_len <= 0) {
            for (int i = 0; i < group * head_dim; i++) store_value(out, first_value + i, query_bf16, 0.0f);
            continue;
        }
        if (seq_len > max_seq_len) {
            failed = 1;
            continue;
        }
        float *scores = scratch + (int64_t)omp_get_thread_num() * group * max_seq_len;
        /* The group's query heads as float32 (a bfloat16 query widened exactly). */
        float q[MAX_GROUP * MAX_HEAD_DIM / 4];
        if ((int64_t)group * head_dim > (int64_t)(sizeof q / sizeof q[0])) {
            failed = 1;
            continue;
        }
        for (int i = 0; i < group * head_dim; i++) q[i] = load_value(query, first_value + i, query_bf16);
        const int32_t *table = block_tables + (int64_t)row * table_stride;
        float keys[LANES * MAX_HEAD_DIM], value[MAX_HEAD_DIM];
        v16 best[MAX_GROUP];
        for (int g = 0; g < group; g++) best[g] = (v16){0} - __builtin_inff();

        for (int first = 0; first < seq_len; first += LANES) {
            const int count = seq_len - first < LANES ? seq_len - first : LANES;
            for (int j = 0; j < count; j++) {
                const int t = first + j;
                load_row(k_cache, cache_index(table, t, block_size, block_stride, token_stride, kv_head, head_dim),
                         head_dim, cache_bf16, keys + j * head_dim);
            }
            for (int g = 0; g < group; g++) {
                v16 acc[LANES];
                for (int j = 0; j < LANES; j++) {
                    acc[j] = (v16){0};
                    if (j >= count) continue;
                    for (int c = 0; c < chunks; c++)
                        acc[j] += load16(q + g * head_dim + c * LANES) * load16(keys + j * head_dim + c * LANES);
                }
                v16 tile = sums_of_16(acc) * scale;
                float *s = scores + (int64_t)g * max_seq_len + first;
                if (count == LANES) {
                    store16(s, tile);
                } else {
                    for (int j = 0; j < count; j++) s[j] = tile[j];
                    for (int j = count; j < LANES; j++) tile[j] = -__builtin_inff();
                }
                best[g] = max16(best[g], tile);
            }
        }

        float total[MAX_GROUP];
        for (int g = 0; g < group; g++) {
            float *s = scores + (int64_t)g * max_seq_len;
            const float top = max_of_16(best[g]);
            v16 sums = {0};
            int t = 0;
            for (; t + LANES <= seq_len; t += LANES) {
                v16 e = exp16(load16(s + t) - top);
                store16(s + t, e);
                sums += e;
            }
            v16 tail = {0};
            for (int l = 0; t + l < seq_len; l++) tail[l] = s[t + l] - top;
            v16 e = exp16(tail);
            for (int l = 0; t + l < seq_len; l++) {
                s[t + l] = e[l];
                sums[l] += e[l];
            }
            total[g] = sum16(sums);
        }

        v16 mixed[MAX_GROUP * (MAX_HEAD_DIM / LANES) / 4];
        /* group * chunks accumulators: group * head_dim <= 4096 floats. */
        if ((int64_t)group * chunks > (int64_t)(sizeof mixed / sizeof mixed[0])) {
            failed = 1;
            continue;
        }
        memset(mixed, 0, sizeof(v16) * (size_t)group * chunks);
        for (int t = 0; t < seq_len; t++) {
            load_row(v_cache, cache_index(table, t, block_size, block_stride, token_stride, kv_head, head_dim), head_dim,
                     cache_bf16, value);
            for (int g = 0; g < group; g++) {
                const float p = scores[(int64_t)g * max_seq_len + t];
                for (int c = 0; c < chunks; c++) mixed[g * chunks + c] += p * load16(value + c * LANES);
            }
        }
        for (int g = 0; g < group; g++) {
            const float inverse = 1.0f / total[g];
            for (int c = 0; c < chunks; c++) {
                const v16 part = mixed[g * chunks + c] * inverse;
                for (int l = 0; l < LANES; l++) store_value(out, first_value + g * head_dim + c * LANES + l, query_bf16, part[l]);
            }
        }
    }
    return failed ? 2 : 0;
}

/* One head of head_dim values rotated by RoPE (neox layout: element i pairs with i + half) in
 * float32, rounded to the inputs' dtype: the numbers engine/attention/torch_rotary.rotate computes,
 * x * (cos | cos) rounded, then swap_halves(x) * (-sin | sin) added to it in one fused
 * multiply-add, as torch's vectorized addcmul_ does. */
static void rotate_head(const void *x, int64_t at, int bf16, const float *cos, const float *sin, int head_dim,
                        float *out) {
    const int half = head_dim / 2;
    for (int i = 0; i < head_dim; i++) {
        const int j = i < half ? i : i - half;
        const float own = load_value(x, at + i, bf16);
        const float other = load_value(x, at + (i < half ? i + half : i - half), bf16);
        const float product = own * cos[j];
        const float sum = __builtin_fmaf(other, i < half ? -sin[j] : sin[j], product);
        out[i] = bf16 ? from_bf16(to_bf16(sum)) : sum;
    }
}

/* RoPE on a step's queries and keys, and its keys and values written to their cache slots: what
 * engine/attention/torch_rotary.rotary_write_kv does in about a dozen torch calls a layer, in one.
 *
 * query [tokens, num_heads, head_dim], key and value [tokens, num_kv_heads, head_dim] in float32 or
 * bfloat16 (inputs_bf16), heads contiguous within a token, tokens q_stride, k_stride and v_stride
 * elements apart; cos and sin [tokens, head_dim / 2] float32; slots [tokens] int64 (block *
 * block_size + offset; -1: not written); caches [slots, num_kv_heads, head_dim] in float32 or
 * bfloat16 (cache_bf16); out_query [tokens, num_heads, head_dim] in the inputs' dtype, the rotated
 * query. Element by element, so a token's bits never depend on the others. */
int rotary_write_kv(const void *query, int64_t q_stride, const void *key, int64_t k_stride, const void *value,
                    int64_t v_stride, int inputs_bf16, const float *cos, const float *sin, const int64_t *slots,
                    int64_t tokens, int num_heads, int num_kv_heads, int head_dim, void *k_cache, void *v_cache,
                    int cache_bf16, int threads, void *out_query) {
    if (head_dim % 2 || head_dim > MAX_HEAD_DIM) return 1;
    const int half = head_dim / 2;
    const int64_t row = (int64_t)num_kv_heads * head_dim;
#pragma omp parallel for schedule(static) num_threads(threads) if (tokens >= 64)
    for (int64_t t = 0; t < tokens; t++) {
        float rotated[MAX_HEAD_DIM];
        const float *c = cos + t * half, *s = sin + t * half;
        for (int h = 0; h < num_heads; h++) {
            rotate_head(query, t * q_stride + (int64_t)h * head_dim, inputs_bf16, c, s, head_dim, rotated);
            const int64_t at = (t * num_heads + h) * head_dim;
            for (int i = 0; i < head_dim; i++) store_value(out_query, at + i, inputs_bf16, rotated[i]);
        }
        const int64_t slot = slots[t];
        if (slot < 0) continue;
        for (int h = 0; h < num_kv_heads; h++) {
            const int64_t at = slot * row + (int64_t)h * head_dim;
            rotate_head(key, t * k_stride + (int64_t)h * head_dim, inputs_bf16, c, s, head_dim, rotated);
            for (int i = 0; i < head_dim; i++) store_value(k_cache, at + i, cache_bf16, rotated[i]);
            const int64_t from = t * v_stride + (int64_t)h * head_dim;
            for (int i = 0; i < head_dim; i++)
                store_value(v_cache, at + i, cache_bf16, load_value(value, from + i, inputs_bf16));
        }
    }
    return 0;
}
