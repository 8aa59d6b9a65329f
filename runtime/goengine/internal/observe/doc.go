// Package observe lets the engine see the input of every matrix product with a model weight while a forward
// pass runs, as llama.cpp's llama-imatrix does: it installs an evaluation callback on the backend's ggml
// scheduler (ggml_backend_sched_set_eval_callback). For each node ggml asks the callback whether the node's data
// is wanted; the answer is computed in C (glue.c: the node is a MUL_MAT or MUL_MAT_ID and its first source is
// one of the registered weights), so ordinary nodes never enter Go. ggml then computes the graph up to that
// node, synchronises, and calls again; that call reaches Go, which reads the node's second source (and, for
// MUL_MAT_ID, the expert ids) and hands the rows to the caller. Nothing in the graph or the weights changes:
// with the hook installed the results are the same bits as without, computed in more pieces.
//
// The weights and the scheduler are found through package ggmlabi (the cgo types of Ollama's ggml package);
// the op ids of MUL_MAT and MUL_MAT_ID are those of Ollama v0.24.0's ggml and are checked against
// ggml_op_name at start-up.
package observe
