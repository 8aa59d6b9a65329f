// Package eval is the quality gate of phonellm: does the quantized phone model still answer like the
// fine-tuned reference?
//
// It has two checks and a gate:
//
//   - The distribution check ([CompareDistributions]) runs a reference GGUF (F16/BF16, or F32 for small
//     models) and a candidate (e.g. Q4_K_M) over a prompt set and compares their full-vocabulary next-token
//     distributions at every position: KL divergence KL(P_ref || P_cand) (mean, median, p99, max), top-1
//     agreement, and the perplexity of both. The two models run in lock-step: the reference streams each
//     position's logits through a small bounded queue to the candidate's callback, so memory holds one
//     forward chunk per model plus the queue and one float64 per token; nothing is written to disk (llama.cpp's
//     --kl-divergence first saves ~10 GiB of base logits).
//   - The task check ([ScoreTask], [CompareEndpoints]) sends a labelled JSONL set of chat prompts
//     ({"messages":[…],"label":"5"}) to any OpenAI-compatible endpoint at temperature 0, extracts the answer
//     with a regular expression (default `RISK_LEVEL:\s*(\d+)`) and scores accuracy, per-class precision,
//     recall and F1, macro-F1, unparsable answers and latency; with a second endpoint it compares both
//     side by side on the same items.
//   - Scores ([ScoreOptions]): when every answer is one of a fixed set of labels (RISK_LEVEL: 1 … 5), the
//     endpoint's log-probabilities give each item a probability per label (one constrained request read
//     where the answers part, or one forced request per label), and with it the Brier score, log-loss,
//     expected calibration error (with a reliability table), ROC-AUC of P(high risk) and the operating
//     point at a probability cutoff; two endpoints' probabilities compare item by item. An endpoint's
//     answers can be saved and compared later instead of asked again (answers files).
//   - The sensitivity check ([Sensitivity], optional and slow) quantizes the reference once per group of
//     tensors (e.g. every layer's ffn_down) with that group raised to Q8_0, ranks the groups by the KLD this
//     saves, and suggests --tensor-type overrides with the best gain per MiB.
//   - The gate ([Thresholds], [Gate]) turns the figures into a pass/fail verdict with reasons, so `phonellm
//     eval` exits non-zero and `ship` can run it first; a Gate puts a threshold on any figure (auc>=0.85).
//
// The result names how the candidate was made when its metadata says so (the importance matrix and an
// automatic mix, quantize.ReadProvenance). [LogitCache] computes a reference's logits once for many
// comparisons (quantize auto measures dozens of candidates against one reference).
//
// [Run] is the stage API. Models are loaded through a [Loader] supplied by the caller (the CLI passes the Go
// engine's loader), so this package does not link the cgo inference engine.
package eval
