// Command phonellm takes a fine-tuned open-weights model from training to a fleet of phones: merge a LoRA
// adapter, convert to GGUF, quantize, check the phone fit, publish to the Hugging Face Hub, ship to replicas and
// serve an OpenAI-compatible API. Run `phonellm help` for the commands and `phonellm help environment` for the
// environment variables.
//
// # Layout
//
// One file per command (convert.go, quantize.go, …) parses flags into a stage's Options, runs the stage and
// renders its Result; exit codes and hints live in exit.go, the environment table in env.go, terminal rendering
// in internal/ui. Stage packages under pipeline/ and runtime/ never import this package, cobra or lipgloss.
package main
