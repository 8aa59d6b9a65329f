// The scheduler callback of package observe. ggml_backend_sched calls it
// for every node of a graph with ask = true ("do you want this node's
// data?"), computes the graph up to the first node that says yes, and calls
// it again with ask = false once that node is computed (ggml-backend.cpp,
// ggml_backend_sched_compute_splits). The ask answer is decided here in C,
// without entering Go: the node must be a MUL_MAT or MUL_MAT_ID whose first
// source is one of the registered weight tensors (a sorted array of
// pointers). Only the ask = false calls go to Go.
//
// Declarations use void pointers for ggml's structs; the functions come from
// Ollama's vendored ggml (ggml-base), linked into the binary by its package.

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"
#include "observe.h"

void        ggml_backend_sched_set_eval_callback(void * sched, bool (*cb)(void *, bool, void *), void * user_data);
const char * ggml_op_name(int op);

static int compare_ptr(const void * a, const void * b) {
    uintptr_t x = (uintptr_t) * (void * const *) a;
    uintptr_t y = (uintptr_t) * (void * const *) b;
    return (x > y) - (x < y);
}

static bool phonellm_observe_cb(void * t, bool ask, void * user_data) {
    struct phonellm_observer * o = (struct phonellm_observer *) user_data;
    if (!ask) {
        return phonellmObserveNode(o->handle, t);
    }
    int32_t op = *(const int32_t *) ((const char *) t + o->off_op);
    if (op != o->op_mul_mat && op != o->op_mul_mat_id) {
        return false;
    }
    void * src0 = ((void * const *) ((const char *) t + o->off_src))[0];
    return src0 != NULL && bsearch(&src0, o->weights, o->n_weights, sizeof(void *), compare_ptr) != NULL;
}

void phonellm_observe_sort(void ** weights, size_t n) {
    qsort(weights, n, sizeof(void *), compare_ptr);
}

void phonellm_observe_set(void * sched, struct phonellm_observer * o) {
    ggml_backend_sched_set_eval_callback(sched, o != NULL ? phonellm_observe_cb : NULL, o);
}

int phonellm_observe_op_is(int op, const char * name) {
    const char * got = ggml_op_name(op);
    return got != NULL && strcmp(got, name) == 0;
}
