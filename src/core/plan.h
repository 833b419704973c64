/*
 * plan.h — where a graph's batch buffers live. Every value, gradient and
 * aux buffer of a batch is a slice of one arena, and two buffers share
 * bytes when their lifetimes in a step do not overlap (the lifetimes are
 * in plan.c; the offsets come from a greedy placement, largest first, into
 * the smallest gap that holds it).
 *
 * Training keeps every value and aux buffer for the whole step (backward
 * reads them) and shares the gradients, each of which lives only from its
 * first write to its node's backward. Inference (predict, evaluate) has no
 * gradients, and a value lives from the forward that writes it to its last
 * reader, so a deep model's forward needs a few layers' worth of memory.
 */
#ifndef FL_PLAN_H
#define FL_PLAN_H

#include "graph.h"

#define FL_PLAN_NONE SIZE_MAX
#define FL_ARENA_ALIGN 256 /* bytes: every buffer starts on a multiple (AVX-512 loads, GPU coalescing) */

typedef struct fl_plan {
    size_t bytes;            /* the arena */
    size_t *val, *grad, *aux; /* per node: offset in the arena, or FL_PLAN_NONE */
    size_t *vbytes, *abytes; /* per node: the value's (and gradient's) bytes, aux's bytes */
    bool overflow;           /* the sizes do not fit in a size_t */
} fl_plan;

/* The plan for `batch` samples. need[i]: node i needs a gradient (NULL: the
 * nodes' needs_grad); infer: no gradients, values by lifetime; align: every
 * offset and size a multiple of it; fixed: count aux_fixed (false: only the
 * per-sample part, for reports per sample). Fails only for want of memory;
 * sizes past a size_t set p->overflow. */
fl_status fl_plan_make(const fl_graph *g, const bool *need, int64_t batch, bool infer, size_t align, bool fixed,
                       fl_plan *p);
void fl_plan_free(fl_plan *p);

/* A Reshape borrows its input's value, and its gradient when it is the
 * input's only consumer: it has no buffer of its own there. */
bool fl_plan_val_view(const fl_node *n);
bool fl_plan_grad_view(const fl_node *n);

/* The placement itself, for tests: n buffers of bytes[i] live over steps
 * [lo[i], hi[i]] (inclusive); writes off[i] so that no two that overlap in
 * time overlap in memory, and returns the arena's size (*overflow set when
 * it passes SIZE_MAX). */
size_t fl_plan_place(int n, const int64_t *lo, const int64_t *hi, const size_t *bytes, size_t *off, bool *overflow);

#endif
