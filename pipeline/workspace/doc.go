// Package workspace is the project folder that chains the stages: a project file (phonellm.yaml) that says
// what to build (base model, adapters, quant type, phone profile, Hub repo, fleet) and a state file
// (.phonellm/state.json) that records every run of a stage: what it read (inputs with their paths and
// fingerprints), its options, the artifacts it wrote with size and sha256, and its result. A later stage finds
// its input there without retyping paths, and a stage whose inputs and options are unchanged is skipped.
//
// [Workspace.Run] is the one way a stage goes through the workspace: fingerprint the inputs, skip when an
// identical run's outputs are still on disk, otherwise run and record. A run whose inputs or output the user
// chose on the command line instead of the workspace's is a one-off ([Step.OneOff]): recorded, but never what a
// later stage reads by default, so `merge --lora OTHER -o ../scratch` cannot take over the workspace.
// [Workspace.Status] checks the stage graph ([Stages]) against the disk: up to date, stale (an input changed,
// or a stage it reads from ran again since), missing (an output is gone) or not run; [Workspace.Reset] forgets
// stages so they start over.
//
// Input fingerprints are sha256 over (relative path, size, modification time) of every file of the input, as
// restic and make do: cheap for multi-gigabyte checkpoints, and changed by any rewrite. Outputs carry a full
// sha256 computed while they were written.
package workspace
