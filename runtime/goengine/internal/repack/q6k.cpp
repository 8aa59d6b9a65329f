// A GEMM for Q6_K weights on AVX2, plugged into ggml-cpu next to its repack
// kernels (ggml-cpu repacks Q4_0, Q4_K and IQ4_NL on AVX2, not Q6_K, which
// Q4_K_M files use for attn_v, ffn_down and output in a third to half of the
// layers).
//
// ggml's plain path computes every (weight row, activation row) pair with
// ggml_vec_dot_q6_K_q8_K, unpacking the 6-bit weights again for each
// activation row. This kernel unpacks a weight block once and applies it to
// four activation rows, and takes the activations' "32 × q8" correction from
// the work buffer instead of recomputing it per weight row. Per pair it runs
// the same integer operations into the same eight int32 lanes, the same
// fused multiply-add per block and the same horizontal sum as the AVX2
// vec_dot, so its results are bit-identical to the plain path (the tests
// check that).
//
// Interfaces used (Ollama v0.24.0's vendored ggml): ggml::cpu::tensor_traits
// and extra_buffer_type (ggml-cpu/traits.h), struct ggml_compute_params
// (ggml-cpu/ggml-cpu-impl.h), the CPU_REPACK buffer type's context slot
// (ggml-backend-impl.h, checked against ggml_backend_buft_get_device at run
// time), ggml_barrier and quantize_row_q8_K. ggml_tensor fields are reached
// through offsets that the Go side reads from Ollama's cgo type.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#    include <immintrin.h>
#    define PHONELLM_Q6K 1
#endif

struct ggml_tensor;
struct ggml_threadpool;
struct ggml_backend_device;
struct ggml_backend_buffer;
struct ggml_backend_buffer_type;

struct ggml_compute_params {
    int                       ith, nth;
    size_t                    wsize;
    void *                    wdata;
    struct ggml_threadpool *  threadpool;
};

namespace ggml::cpu {
class tensor_traits {
  public:
    virtual ~tensor_traits();
    virtual bool work_size(int n_threads, const struct ggml_tensor * op, size_t & size)        = 0;
    virtual bool compute_forward(struct ggml_compute_params * params, struct ggml_tensor * op) = 0;
};

class extra_buffer_type {
  public:
    virtual ~extra_buffer_type();
    virtual bool            supports_op(ggml_backend_device * dev, const struct ggml_tensor * op) = 0;
    virtual tensor_traits * get_tensor_traits(const struct ggml_tensor * op)                     = 0;
};
}  // namespace ggml::cpu

std::vector<ggml_backend_buffer_type *> & ggml_backend_cpu_get_extra_buffer_types();
ggml_backend_buffer_type *                ggml_backend_cpu_repack_buffer_type(void);

extern "C" {
ggml_backend_device *      ggml_backend_buft_get_device(ggml_backend_buffer_type * buft);
ggml_backend_buffer_type * ggml_backend_buffer_get_type(ggml_backend_buffer * buffer);
bool                       ggml_backend_buffer_is_host(ggml_backend_buffer * buffer);
void                       ggml_barrier(struct ggml_threadpool * tp);
void                       quantize_row_q8_K(const float * x, void * y, int64_t k);
}

namespace {

// Offsets of struct ggml_tensor's fields (set once by phonellm_repack_enable).
struct tensor_layout {
    size_t type, buffer, ne, nb, op, src, data, extra;
};
tensor_layout L;

template <class T> T field(const ggml_tensor * t, size_t off) {
    T v;
    std::memcpy(&v, (const char *) t + off, sizeof v);
    return v;
}

int32_t           t_type(const ggml_tensor * t) { return field<int32_t>(t, L.type); }
int32_t           t_op(const ggml_tensor * t) { return field<int32_t>(t, L.op); }
int64_t           t_ne(const ggml_tensor * t, int i) { return field<int64_t>(t, L.ne + 8 * i); }
size_t            t_nb(const ggml_tensor * t, int i) { return field<size_t>(t, L.nb + sizeof(size_t) * i); }
ggml_tensor *     t_src(const ggml_tensor * t, int i) { return field<ggml_tensor *>(t, L.src + sizeof(void *) * i); }
void *            t_data(const ggml_tensor * t) { return field<void *>(t, L.data); }
void *            t_extra(const ggml_tensor * t) { return field<void *>(t, L.extra); }
ggml_backend_buffer * t_buffer(const ggml_tensor * t) { return field<ggml_backend_buffer *>(t, L.buffer); }

constexpr int32_t TYPE_F32 = 0, TYPE_Q6_K = 14, OP_MUL_MAT = 29;
constexpr int     QK     = 256;
constexpr size_t  Q6BLK  = 210;        // block_q6_K: ql[128] qh[64] scales[16] d(f16)
constexpr size_t  Q8BLK  = 4 + 256 + 32;  // block_q8_K: d(f32) qs[256] bsums[16]
constexpr size_t  CORBLK = 8 * 32;        // per q8_K block: 8 × 16 int16 of 32·(q8 pair sums)

#ifdef PHONELLM_Q6K

// hsum8 adds the eight lanes in the order of ggml's hsum_float_8.
inline float hsum8(__m256 x) {
    __m128 r = _mm256_extractf128_ps(x, 1);
    r        = _mm_add_ps(r, _mm256_castps256_ps128(x));
    r        = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r        = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// scale16 broadcasts scales s[2k] (lanes 0-7) and s[2k+1] (lanes 8-15) as int16.
inline __m256i scale16(const int8_t * s, int k) {
    return _mm256_set_m128i(_mm_set1_epi16(s[2 * k + 1]), _mm_set1_epi16(s[2 * k]));
}

// rowq8 is one activation row quantized to q8_K with its corrections.
struct rowq8 {
    const uint8_t * q8;   // nb blocks of Q8BLK
    const int16_t * cor;  // nb × 128 int16
};

// dot computes NC outputs of one weight row (nb blocks at w) against NC
// activation rows, bit-identical to ggml_vec_dot_q6_K_q8_K for each.
template <int NC> inline void dot(const uint8_t * w, int nb, const rowq8 * a, float * out) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m2 = _mm256_set1_epi8(3);
    __m256        acc[NC];
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
    }
    for (int i = 0; i < nb; i++) {
        const uint8_t * blk = w + (size_t) i * Q6BLK;
        const uint8_t * ql  = blk;
        const uint8_t * qh  = blk + 128;
        const int8_t *  sc  = (const int8_t *) (blk + 192);
        uint16_t        dh;
        std::memcpy(&dh, blk + 208, 2);
        const float xd = _cvtsh_ss(dh);
        __m256i     sumi[NC];
        for (int c = 0; c < NC; c++) {
            sumi[c] = _mm256_setzero_si256();
        }
        // The int32 lanes receive the same products as in ggml's kernel; integer
        // adds in another grouping give the same bits.
        for (int j = 0; j < 2; j++) {
            const __m256i b1 = _mm256_loadu_si256((const __m256i *) (ql + 64 * j));
            const __m256i b2 = _mm256_loadu_si256((const __m256i *) (ql + 64 * j + 32));
            const __m256i bh = _mm256_loadu_si256((const __m256i *) (qh + 32 * j));
            __m256i       q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(b2, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                const __m256i s = scale16(sc, 4 * j + k);
                for (int c = 0; c < NC; c++) {
                    const uint8_t * y   = a[c].q8 + (size_t) i * Q8BLK + 4 + 128 * j + 32 * k;
                    const int16_t * cor = a[c].cor + (size_t) i * 128 + 16 * (4 * j + k);
                    __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *) y));
                    p         = _mm256_sub_epi16(p, _mm256_loadu_si256((const __m256i *) cor));
                    sumi[c]   = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s, p));
                }
            }
        }
        for (int c = 0; c < NC; c++) {
            float yd;
            std::memcpy(&yd, a[c].q8 + (size_t) i * Q8BLK, 4);
            const float d = yd * xd;
            acc[c]        = _mm256_fmadd_ps(_mm256_broadcast_ss(&d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) {
        out[c] = hsum8(acc[c]);
    }
}

#endif

class q6k_traits : public ggml::cpu::tensor_traits {
  public:
    static size_t row_bytes(int64_t k) { return (size_t) (k / QK) * (Q8BLK + 2 * 128); }

    bool work_size(int, const ggml_tensor * op, size_t & size) override {
        const ggml_tensor * src1 = t_src(op, 1);
        size                     = row_bytes(t_ne(src1, 0)) * (size_t) (t_ne(src1, 1) * t_ne(src1, 2) * t_ne(src1, 3));
        return true;
    }

    bool compute_forward(ggml_compute_params * params, ggml_tensor * op) override {
        if (t_op(op) != OP_MUL_MAT) {
            return false;
        }
#ifdef PHONELLM_Q6K
        const ggml_tensor * src0 = t_src(op, 0);
        const ggml_tensor * src1 = t_src(op, 1);
        const int64_t       K = t_ne(src0, 0), M = t_ne(src0, 1);
        const int64_t       n1 = t_ne(src1, 1), n2 = t_ne(src1, 2), n3 = t_ne(src1, 3);
        const int64_t       N  = n1 * n2 * n3;
        const int           nb = (int) (K / QK);
        const size_t        rb = row_bytes(K);
        uint8_t *           wd = (uint8_t *) params->wdata;
        const int           ith = params->ith, nth = params->nth;

        // 1. Quantize the activation rows (as the plain path does) and store
        //    32·(pair sums of q8) for the unsigned-weight correction.
        const __m256i m32s = _mm256_set1_epi8(32);
        for (int64_t r = ith; r < N; r += nth) {
            const int64_t i1 = r % n1, i2 = (r / n1) % n2, i3 = r / (n1 * n2);
            const float * x  = (const float *) ((const char *) t_data(src1) + i1 * t_nb(src1, 1) + i2 * t_nb(src1, 2) + i3 * t_nb(src1, 3));
            uint8_t *     q8 = wd + (size_t) r * rb;
            int16_t *     cor = (int16_t *) (q8 + (size_t) nb * Q8BLK);
            quantize_row_q8_K(x, q8, K);
            for (int i = 0; i < nb; i++) {
                for (int k = 0; k < 8; k++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *) (q8 + (size_t) i * Q8BLK + 4 + 32 * k));
                    _mm256_storeu_si256((__m256i *) (cor + (size_t) i * 128 + 16 * k), _mm256_maddubs_epi16(m32s, y));
                }
            }
        }
        ggml_barrier(params->threadpool);

        // 2. Each thread takes a contiguous range of weight rows, all
        //    activation rows, four at a time.
        const int64_t   r0 = M * ith / nth, r1 = M * (ith + 1) / nth;
        const uint8_t * w0 = (const uint8_t *) t_data(src0);
        const size_t    wb = t_nb(src0, 1);
        for (int64_t c0 = 0; c0 < N; c0 += 4) {
            const int nc = (int) (N - c0 < 4 ? N - c0 : 4);
            rowq8     a[4];
            float *   dst[4];
            for (int c = 0; c < nc; c++) {
                const int64_t r = c0 + c;
                a[c].q8         = wd + (size_t) r * rb;
                a[c].cor        = (const int16_t *) (a[c].q8 + (size_t) nb * Q8BLK);
                const int64_t i1 = r % n1, i2 = (r / n1) % n2, i3 = r / (n1 * n2);
                dst[c]           = (float *) ((char *) t_data(op) + i1 * t_nb(op, 1) + i2 * t_nb(op, 2) + i3 * t_nb(op, 3));
            }
            float out[4];
            for (int64_t m = r0; m < r1; m++) {
                const uint8_t * w = w0 + (size_t) m * wb;
                switch (nc) {
                    case 4: dot<4>(w, nb, a, out); break;
                    case 3: dot<3>(w, nb, a, out); break;
                    case 2: dot<2>(w, nb, a, out); break;
                    default: dot<1>(w, nb, a, out); break;
                }
                for (int c = 0; c < nc; c++) {
                    dst[c][m] = out[c];
                }
            }
        }
        return true;
#else
        (void) params;
        return false;
#endif
    }
};

q6k_traits Q6K;

// extra wraps the CPU_REPACK buffer type's own extra_buffer_type and adds
// the Q6_K tensors tagged with Q6K.
class extra : public ggml::cpu::extra_buffer_type {
  public:
    explicit extra(ggml::cpu::extra_buffer_type * inner) : inner(inner) {}

    static bool ours(const ggml_tensor * op) {
        if (t_op(op) != OP_MUL_MAT) {
            return false;
        }
        const ggml_tensor * w = t_src(op, 0);
        return w != nullptr && t_extra(w) == (void *) &Q6K && t_type(w) == TYPE_Q6_K;
    }

    bool supports_op(ggml_backend_device * dev, const ggml_tensor * op) override {
        if (ours(op)) {
            const ggml_tensor * w = t_src(op, 0), *x = t_src(op, 1);
            return t_ne(w, 2) == 1 && t_ne(w, 3) == 1 && x != nullptr && t_type(x) == TYPE_F32 &&
                   t_nb(x, 0) == sizeof(float) && t_nb(op, 0) == sizeof(float) &&
                   (t_buffer(x) == nullptr || ggml_backend_buffer_is_host(t_buffer(x)));
        }
        return inner->supports_op(dev, op);
    }

    ggml::cpu::tensor_traits * get_tensor_traits(const ggml_tensor * op) override {
        if (ours(op)) {
            return &Q6K;
        }
        return inner->get_tensor_traits(op);
    }

  private:
    ggml::cpu::extra_buffer_type * inner;
};

int q6k_ready;

}  // namespace

extern "C" {

// phonellm_repack_enable records the tensor layout, makes CPU_REPACK one of
// ggml-cpu's extra buffer types and, where the layout of the buffer type
// checks out and AVX2 is compiled in, wraps its extra_buffer_type to add the
// Q6_K kernel. Returns 0 without a repack buffer type, 1 with it, 2 with the
// Q6_K kernel as well. Idempotent.
int phonellm_repack_enable(const size_t * layout) {
    static int done = -1;
    if (done >= 0) {
        return done;
    }
    L = tensor_layout{ layout[0], layout[1], layout[2], layout[3], layout[4], layout[5], layout[6], layout[7] };
    ggml_backend_buffer_type * repack = ggml_backend_cpu_repack_buffer_type();
    if (repack == nullptr) {
        return done = 0;
    }
#ifdef PHONELLM_Q6K
    // struct ggml_backend_buffer_type { iface (7 function pointers); device; context; no_alloc; }
    void ** slots = (void **) repack;
    if (slots[7] == (void *) ggml_backend_buft_get_device(repack) && slots[8] != nullptr) {
        slots[8]  = new extra((ggml::cpu::extra_buffer_type *) slots[8]);
        q6k_ready = 1;
    }
#endif
    std::vector<ggml_backend_buffer_type *> & extras = ggml_backend_cpu_get_extra_buffer_types();
    bool                                      found  = false;
    for (ggml_backend_buffer_type * b : extras) {
        found = found || b == repack;
    }
    if (!found) {
        extras.push_back(repack);
    }
    return done = q6k_ready ? 2 : 1;
}

// phonellm_q6k_tag marks tensor t (Q6_K, plain layout, left in place) as
// computed by the Q6_K kernel: its buffer becomes buf (a CPU_REPACK buffer)
// and its extra the kernel. Returns 0 when the kernel is not available.
int phonellm_q6k_tag(void * buf, void ** buffer_field, void ** extra_field) {
    if (!q6k_ready || ggml_backend_buffer_get_type((ggml_backend_buffer *) buf) != ggml_backend_cpu_repack_buffer_type()) {
        return 0;
    }
    *buffer_field = buf;
    *extra_field  = (void *) &Q6K;
    return 1;
}
}
