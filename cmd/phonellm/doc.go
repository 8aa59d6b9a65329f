// Command phonellm takes a fine-tuned open-weights model from training to a fleet of phones: merge a LoRA
// adapter, convert to GGUF, quantize, check the phone fit, publish to the Hugging Face Hub, ship to replicas and
// serve an OpenAI-compatible API. Run `phonellm help` for the commands and `phonellm help environment` for the
// environment variables.
//
// # Layout
//
// One file per command (convert.go, quantize.go, …) parses flags into a stage's Options, runs the stage and
// renders its Result. The workspace-backed stages (merge, convert, quantize) go through runStage (stage.go),
// which is workspace.Run plus -v's list of inputs; inputs.go resolves which model a stage reads. Exit codes
// live in exit.go: stage errors classify themselves (pipeline/errors.go) and cmd only maps the class; hints
// come from cmd or from the error. The environment table is env.go, terminal rendering internal/ui. Stage
// packages under pipeline/ and runtime/ never import this package, cobra or lipgloss.
package main
