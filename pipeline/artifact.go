package pipeline

// Artifact is a file a stage wrote, with the size and sha256 computed while it was written.
type Artifact struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"` // "gguf", "checkpoint", "bundle", "card", ...
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}
