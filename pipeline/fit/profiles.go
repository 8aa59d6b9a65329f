package fit

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

//go:embed profiles.json
var builtinJSON []byte

// Profile is one phone class: how much memory one app process may keep resident there, and the CPU facts the
// runtime plan needs. Built-in profiles come from profiles.json (sources in its comments and in doc.go).
type Profile struct {
	Name          string  `json:"name"`            // "16gb"
	RAMGB         float64 `json:"ram_gb"`          // marketed RAM, decimal GB
	MemTotalBytes int64   `json:"mem_total_bytes"` // typical MemTotal the phone reports
	UsableBytes   int64   `json:"usable_bytes"`    // resident budget of one app process before the LMK kills it
	BigCores      int     `json:"big_cores"`       // performance cores (threads for the runtime)
	BandwidthGBps float64 `json:"bandwidth_gbps"`  // theoretical DRAM bandwidth, GB/s
	Note          string  `json:"note,omitempty"`
	// Anchors are published speed figures of phones of this tier: what capacity planning calibrates its
	// prompt-speed estimate with (capacity.go).
	Anchors []Anchor `json:"anchors,omitempty"`
}

// Anchor is one published prompt-processing figure: a known model (Known, by Hugging Face name) evaluated a
// prompt of PromptTokens tokens in PromptSeconds on a phone of the profile's tier, as Source reports it.
type Anchor struct {
	Model         string  `json:"model"`
	Quant         string  `json:"quant"`
	PromptTokens  int     `json:"prompt_tokens"`
	PromptSeconds float64 `json:"prompt_seconds"`
	Source        string  `json:"source"`
}

// MinRamTotalBytes is the Acurast benchmarkFilters.minRamTotalBytes that selects phones of this tier or bigger:
// 0.9 × marketed RAM (phones report MemTotal below the marketed size; acurast.md §5.1).
func (p Profile) MinRamTotalBytes() int64 { return int64(math.Floor(0.9 * p.RAMGB * 1e9)) }

func (p Profile) validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("profile without a name")
	case p.RAMGB <= 0 || p.RAMGB > 1024 || math.IsNaN(p.RAMGB):
		return fmt.Errorf("profile %q: ram_gb %v out of range (0, 1024]", p.Name, p.RAMGB)
	case p.UsableBytes <= 0 || float64(p.UsableBytes) > p.RAMGB*1.1e9:
		return fmt.Errorf("profile %q: usable_bytes %d must be positive and at most the RAM", p.Name, p.UsableBytes)
	case p.MemTotalBytes < 0 || p.BigCores < 0 || p.BandwidthGBps < 0 || math.IsNaN(p.BandwidthGBps):
		return fmt.Errorf("profile %q: negative mem_total_bytes, big_cores or bandwidth_gbps", p.Name)
	case len(p.Anchors) > 16:
		return fmt.Errorf("profile %q: %d anchors, at most 16", p.Name, len(p.Anchors))
	}
	for i, a := range p.Anchors {
		if a.Model == "" || a.Source == "" || a.PromptTokens < 1 || a.PromptTokens > 1<<20 || !(a.PromptSeconds > 0) || a.PromptSeconds > 1e6 {
			return fmt.Errorf("profile %q: anchor %d: want a model, a source, prompt_tokens in 1..%d and prompt_seconds in (0, 1e6]", p.Name, i, 1<<20)
		}
	}
	return nil
}

// Profiles is an ordered set of phone profiles, looked up by name (case-insensitive).
type Profiles []Profile

type profileFile struct {
	Profiles []Profile `json:"profiles"`
}

// Builtin returns the embedded profiles (6gb, 8gb, 12gb, 16gb, 24gb).
func Builtin() Profiles {
	ps, err := ParseProfiles(builtinJSON)
	if err != nil {
		panic("fit: embedded profiles.json: " + err.Error()) // programmer error: the file is part of the binary
	}
	return ps
}

// maxProfiles bounds a user profile file.
const maxProfiles = 1000

// ParseProfiles parses a profile file: {"profiles": [{"name": ..., "ram_gb": ..., ...}]}. Keys starting with "_"
// are comments.
func ParseProfiles(data []byte) (Profiles, error) {
	var f profileFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("fit: profiles: %w", err)
	}
	if len(f.Profiles) > maxProfiles {
		return nil, fmt.Errorf("fit: profiles: %d entries, at most %d", len(f.Profiles), maxProfiles)
	}
	seen := map[string]bool{}
	for i := range f.Profiles {
		p := &f.Profiles[i]
		p.Name = strings.ToLower(strings.TrimSpace(p.Name))
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("fit: profiles: entry %d: %w", i, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("fit: profiles: %q listed twice", p.Name)
		}
		seen[p.Name] = true
	}
	return Profiles(f.Profiles), nil
}

// LoadProfiles returns the built-in profiles merged with the user file at path (when path is not empty).
func LoadProfiles(path string) (Profiles, error) {
	ps := Builtin()
	if path == "" {
		return ps, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fit: %w", err)
	}
	user, err := ParseProfiles(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return ps.Merge(user), nil
}

// Merge returns ps with every profile of more replacing the one of the same name, or appended when new. The
// result is sorted by usable memory, then name.
func (ps Profiles) Merge(more Profiles) Profiles {
	out := slices.Clone(ps)
	for _, m := range more {
		if i := out.index(m.Name); i >= 0 {
			out[i] = m
		} else {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b Profile) int {
		if a.UsableBytes != b.UsableBytes {
			return cmpInt(a.UsableBytes, b.UsableBytes)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (ps Profiles) index(name string) int {
	name = strings.ToLower(strings.TrimSpace(name))
	for i, p := range ps {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// Names lists the profile names in order.
func (ps Profiles) Names() []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// UnknownProfileError is returned for a profile name that is not in the set; Known lists the valid names.
type UnknownProfileError struct {
	Name  string
	Known []string
}

// InputError classifies the error (pipeline.IsInputError): the profile named is not one the set has.
func (e *UnknownProfileError) InputError() bool { return true }

func (e *UnknownProfileError) Error() string {
	return fmt.Sprintf("fit: unknown phone profile %q (known: %s)", e.Name, strings.Join(e.Known, ", "))
}

// Lookup finds a profile by name, case-insensitively; "16" and "16GB" also find "16gb".
func (ps Profiles) Lookup(name string) (Profile, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, cand := range []string{n, n + "gb"} {
		if i := ps.index(cand); i >= 0 {
			return ps[i], nil
		}
	}
	return Profile{}, &UnknownProfileError{Name: name, Known: ps.Names()}
}
