// C++ glue between Go and ggml-cpu's repack buffer type (enabling it is in
// q6k.cpp). ggml_backend_cpu_repack_buffer_type has C++ linkage and is
// defined in Ollama's vendored ggml-cpu (repack.cpp); the C-linkage functions
// in ggml-backend.cpp. The declarations use
// incomplete struct types only: the field layout of ggml_tensor is handled on
// the Go side from the cgo type of Ollama's package.

#include <cstddef>

struct ggml_backend_buffer_type;
struct ggml_backend_buffer;
struct ggml_tensor;

ggml_backend_buffer_type * ggml_backend_cpu_repack_buffer_type(void);

extern "C" {
ggml_backend_buffer * ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type * buft, size_t size);
void                  ggml_backend_buffer_free(ggml_backend_buffer * buffer);
void                  ggml_backend_buffer_set_usage(ggml_backend_buffer * buffer, int usage);
int                   ggml_backend_buffer_init_tensor(ggml_backend_buffer * buffer, ggml_tensor * tensor);
void                  ggml_backend_tensor_set(ggml_tensor * tensor, const void * data, size_t offset, size_t size);

// phonellm_repack_buffer allocates a small buffer of the repack type, marked
// as holding weights so the scheduler runs ops on them where they live. It
// only serves as the tensors' buffer identity; their bytes stay in place.
void * phonellm_repack_buffer(void) {
    ggml_backend_buffer * buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_repack_buffer_type(), 64);
    if (buf != nullptr) {
        ggml_backend_buffer_set_usage(buf, 1 /* GGML_BACKEND_BUFFER_USAGE_WEIGHTS */);
    }
    return buf;
}

void phonellm_repack_free(void * buf) {
    ggml_backend_buffer_free((ggml_backend_buffer *) buf);
}

// phonellm_repack_tensor points tensor t (whose buffer and extra fields are at
// *buffer_field and *extra_field) at the repack buffer buf and asks the repack
// code for a layout. If there is none it restores the old buffer and returns
// 0; otherwise it rearranges src (a copy of the tensor's n bytes) into the
// tensor's own memory and returns 1.
int phonellm_repack_tensor(void * buf, void * t, void ** buffer_field, void ** extra_field, const void * src, size_t n) {
    void * old = *buffer_field;
    *buffer_field = buf;
    *extra_field  = nullptr;
    ggml_backend_buffer_init_tensor((ggml_backend_buffer *) buf, (ggml_tensor *) t);
    if (*extra_field == nullptr) {
        *buffer_field = old;
        return 0;
    }
    ggml_backend_tensor_set((ggml_tensor *) t, src, 0, n);
    return 1;
}
}
