// Package calibrate is the imatrix stage: it runs a model over calibration data and writes its importance
// matrix as llama.cpp's llama-imatrix does (tools/imatrix/imatrix.cpp at llama.cpp 34af94cd).
//
// The data is a plain-text file or the JSONL prompts eval reads; with Chat every record is rendered through the
// model's chat template, so a fine-tune is calibrated on its own prompts in the form it will be served. The
// tokens of all records are concatenated and cut into chunks of ChunkSize (default 512) tokens; each chunk is
// evaluated from an empty context with every position an output, so every layer sees every token, and the
// model's weight products are accumulated by package imatrix's Collector (llama-imatrix's rules). Every token of
// a chunk counts toward the statistics, as in llama-imatrix; its perplexity estimate, which scores only the
// second half of each chunk, is not computed (eval measures quality). Tokens after the last whole chunk are not
// used, as in llama-imatrix. With a chunk size that is a multiple of the batch (the defaults: 512 and 512) no
// forward pass has fewer than 16 tokens, so llama-imatrix's rule that skips such MUL_MAT inputs never applies.
//
// Runs are resumable: every SaveEvery chunks the statistics so far go to OUT.partial (a GGUF imatrix that
// also records a fingerprint of the model, the data and the options), and Resume continues from it after an
// interruption. The output file appears only when the run completes, written atomically; memory holds the
// statistics (one float64 per weight column and expert) besides the model.
//
// The model is reached through a Loader (the CLI passes the built-in engine's Observe), so this package does
// not link the inference engine.
package calibrate
