// Package workspace is the project folder that chains the stages: a project file (phonellm.yaml) that says
// what to build (base model, adapters, quant type, phone profile, Hub repo, fleet) and a state file
// (.phonellm/state.json) that records every artifact a stage produced, with its size, sha256 and the
// fingerprints of the inputs it was made from. A later stage finds its input there without retyping paths, and a
// stage whose inputs and options are unchanged is skipped.
//
// Input fingerprints are sha256 over (relative path, size, modification time) of every file of the input, as
// restic and make do: cheap for multi-gigabyte checkpoints, and changed by any rewrite. Outputs carry a full
// sha256 computed while they were written.
package workspace
