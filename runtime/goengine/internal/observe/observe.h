#ifndef PHONELLM_OBSERVE_H
#define PHONELLM_OBSERVE_H

#include <stddef.h>
#include <stdint.h>

// One installed observer: the registered weights (sorted), the handle of
// its Go state, and what the ask test reads.
struct phonellm_observer {
    void **   weights;
    size_t    n_weights;
    uintptr_t handle;
    size_t    off_op, off_src;
    int32_t   op_mul_mat, op_mul_mat_id;
};

void phonellm_observe_sort(void ** weights, size_t n);
void phonellm_observe_set(void * sched, struct phonellm_observer * o);
int  phonellm_observe_op_is(int op, const char * name);

#endif
