package plan

import (
	"fmt"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// This file holds llama-quantize's per-tensor type rules (llama_tensor_get_type_impl and its helpers in
// src/llama-quant.cpp): which type each tensor gets for a file type, with and without an importance matrix.

// useMoreBits is the use_more_bits layer pattern: the first and last eighth and every third layer between.
func useMoreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// layerInfo is layer_info: the running counter for dense models, the number in the name with experts.
func (s *planState) layerInfo(counter int, name string) (int, error) {
	if max(1, s.info.ExpertCount) <= 1 {
		return counter, nil
	}
	i, found, err := blockNumber(name)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("quantize: failed to determine the layer of tensor %q", name)
	}
	if i < 0 || i >= s.nLayer {
		return 0, fmt.Errorf("quantize: tensor %q: layer %d outside [0, %d)", name, i, s.nLayer)
	}
	return i, nil
}

// mixture is llama_tensor_get_type_impl (src/llama-quant.cpp) for the file types of gguf.FileTypes and the Qwen
// architectures (never Falcon, never MXFP4_MOE), with and without an importance matrix. The else-if order of
// the source is kept: the low-bit IQ1/IQ2 file types have their own branch before the per-category rules,
// and in it neither ffn_gate nor ffn_up advance their counters.
func (s *planState) mixture(t in, cat category) (gguf.Type, error) {
	ft, nt := s.ftype, s.def
	eight := s.info.ExpertCount == 8
	gqa := s.info.gqa()
	imatrix := s.ov.HasImatrix
	lowIQ := ft == gguf.FileTypeIQ2_XXS || ft == gguf.FileTypeIQ2_XS || ft == gguf.FileTypeIQ1_S ||
		ft == gguf.FileTypeIQ2_S || ft == gguf.FileTypeIQ2_M || ft == gguf.FileTypeIQ1_M
	iq2sm := ft == gguf.FileTypeIQ2_S || ft == gguf.FileTypeIQ2_M
	switch {
	case cat == catOutput || (s.tied && cat == catTokenEmbd):
		switch {
		case s.ov.OutputType != nil: // tied token_embd with --output-tensor-type
			nt = *s.ov.OutputType
		case t.ne0%nt.BlockSize() != 0:
			nt = gguf.TypeQ8_0
		case lowIQ || ft == gguf.FileTypeIQ3_XXS:
			nt = gguf.TypeQ5_K
		case nt != gguf.TypeQ8_0:
			nt = gguf.TypeQ6_K
		}
	case cat == catTokenEmbd: // untied
		switch ft {
		case gguf.FileTypeIQ2_XXS, gguf.FileTypeIQ2_XS, gguf.FileTypeIQ1_S, gguf.FileTypeIQ1_M:
			nt = gguf.TypeQ2_K
		case gguf.FileTypeIQ2_S, gguf.FileTypeIQ2_M, gguf.FileTypeIQ3_XXS:
			nt = gguf.TypeIQ3_S
		case gguf.FileTypeTQ1_0, gguf.FileTypeTQ2_0:
			nt = gguf.TypeQ4_K
		}
	case lowIQ:
		switch {
		case cat.isAttnV():
			switch {
			case gqa >= 4 || s.info.ExpertCount >= 4:
				nt = gguf.TypeQ4_K
			case iq2sm:
				nt = gguf.TypeIQ3_S
			default:
				nt = gguf.TypeQ2_K
			}
			s.iAttnV++
		case eight && cat == catAttnK:
			nt = gguf.TypeQ4_K
		case cat == catFFNDown:
			if s.iDown < s.nLayer/8 { // the running counter, also for expert tensors
				nt = gguf.TypeQ2_K
				if iq2sm {
					nt = gguf.TypeIQ3_S
				}
			}
			s.iDown++
		case cat == catAttnOutput:
			switch {
			case eight:
				nt = gguf.TypeQ5_K
			case ft == gguf.FileTypeIQ1_S || ft == gguf.FileTypeIQ1_M:
				nt = gguf.TypeIQ2_XXS
			case iq2sm:
				nt = gguf.TypeIQ3_S
			}
		}
	case cat.isAttnV():
		switch {
		case ft == gguf.FileTypeQ2_K:
			nt = gguf.TypeQ3_K
			if gqa >= 4 {
				nt = gguf.TypeQ4_K
			}
		case ft == gguf.FileTypeQ2_K_S && gqa >= 4:
			nt = gguf.TypeQ4_K
		case ft == gguf.FileTypeIQ3_XXS:
			switch {
			case gqa >= 4:
				nt = gguf.TypeQ4_K
			case !imatrix:
				nt = gguf.TypeIQ3_S
			default:
				nt = gguf.TypeIQ3_XXS
			}
		case (ft == gguf.FileTypeIQ3_XS || ft == gguf.FileTypeIQ3_S) && gqa >= 4:
			nt = gguf.TypeQ4_K
		case ft == gguf.FileTypeIQ3_M:
			nt = gguf.TypeQ4_K
		case ft == gguf.FileTypeQ3_K_M:
			nt = gguf.TypeQ4_K
			if s.iAttnV < 2 {
				nt = gguf.TypeQ5_K
			}
		case ft == gguf.FileTypeQ3_K_L:
			nt = gguf.TypeQ5_K
		case (ft == gguf.FileTypeIQ4_NL || ft == gguf.FileTypeIQ4_XS) && gqa >= 4:
			nt = gguf.TypeQ5_K
		case (ft == gguf.FileTypeQ4_K_M || ft == gguf.FileTypeQ5_K_M) && useMoreBits(s.iAttnV, s.nAttnV):
			nt = gguf.TypeQ6_K
		case ft == gguf.FileTypeQ4_K_S && s.iAttnV < 4:
			nt = gguf.TypeQ5_K
		}
		if s.is70B && (nt == gguf.TypeQ3_K || nt == gguf.TypeQ4_K) {
			nt = gguf.TypeQ5_K
		}
		if eight {
			nt = gguf.TypeQ8_0
		}
		s.iAttnV++
	case cat == catAttnK:
		switch {
		case eight:
			nt = gguf.TypeQ8_0
		case ft == gguf.FileTypeIQ3_XS:
			nt = gguf.TypeIQ3_XXS
		case ft == gguf.FileTypeIQ3_XXS:
			nt = gguf.TypeIQ2_S
		}
	case cat == catAttnQ:
		switch ft {
		case gguf.FileTypeIQ3_XS:
			nt = gguf.TypeIQ3_XXS
		case gguf.FileTypeIQ3_XXS:
			nt = gguf.TypeIQ2_S
		}
	case cat == catFFNDown:
		i, err := s.layerInfo(s.iDown, t.Name)
		if err != nil {
			return 0, err
		}
		n := s.nLayer
		switch {
		case ft == gguf.FileTypeQ2_K:
			nt = gguf.TypeQ3_K
		case ft == gguf.FileTypeQ2_K_S:
			if i < n/8 {
				nt = gguf.TypeQ4_K
			}
		case ft == gguf.FileTypeIQ3_XXS && !imatrix:
			nt = gguf.TypeQ3_K
			if i < n/8 {
				nt = gguf.TypeQ4_K
			}
		case ft == gguf.FileTypeQ3_K_M:
			nt = gguf.TypeQ4_K // Falcon alone may keep Q3_K here
			if i < n/16 {
				nt = gguf.TypeQ5_K
			}
		case ft == gguf.FileTypeIQ3_M && (i < n/8 || eight && useMoreBits(i, n)):
			nt = gguf.TypeQ4_K
		case ft == gguf.FileTypeQ3_K_L:
			nt = gguf.TypeQ5_K
		case ft == gguf.FileTypeQ4_K_M:
			if useMoreBits(i, n) {
				nt = gguf.TypeQ6_K
			}
		case i < n/8 && (ft == gguf.FileTypeIQ4_NL || ft == gguf.FileTypeIQ4_XS) && !imatrix:
			nt = gguf.TypeQ5_K
		case ft == gguf.FileTypeQ5_K_M && useMoreBits(i, n):
			nt = gguf.TypeQ6_K
		case ft == gguf.FileTypeQ4_K_S && i < n/8:
			nt = gguf.TypeQ5_K
		case (ft == gguf.FileTypeQ4_0 || ft == gguf.FileTypeQ5_0) && imatrix && i < n/8:
			// "Guard against craziness in the first few ffn_down layers", only with an importance matrix.
			nt = gguf.TypeQ4_1
			if ft == gguf.FileTypeQ5_0 {
				nt = gguf.TypeQ5_1
			}
		}
		s.iDown++
	case cat == catAttnOutput:
		if eight {
			switch ft {
			case gguf.FileTypeQ2_K, gguf.FileTypeIQ3_XS, gguf.FileTypeIQ3_XXS, gguf.FileTypeQ3_K_S,
				gguf.FileTypeQ3_K_M, gguf.FileTypeIQ4_NL, gguf.FileTypeQ4_K_S, gguf.FileTypeQ4_K_M,
				gguf.FileTypeIQ3_S, gguf.FileTypeIQ3_M, gguf.FileTypeIQ4_XS:
				nt = gguf.TypeQ5_K
			}
		} else {
			switch ft {
			case gguf.FileTypeQ2_K:
				nt = gguf.TypeQ3_K
			case gguf.FileTypeIQ3_XXS:
				nt = gguf.TypeIQ3_S
			case gguf.FileTypeQ3_K_M, gguf.FileTypeIQ3_M:
				nt = gguf.TypeQ4_K
			case gguf.FileTypeQ3_K_L:
				nt = gguf.TypeQ5_K
			}
		}
	// The ATTENTION_QKV branch upstream (Q4_K_M -> Q5_K …) comes after the attn_v test in the same else-if
	// chain and can never run.
	case cat == catFFNGate || cat == catFFNUp:
		counter := &s.iGate
		if cat == catFFNUp {
			counter = &s.iUp
		}
		i, err := s.layerInfo(*counter, t.Name)
		if err != nil {
			return 0, err
		}
		if ft == gguf.FileTypeIQ3_XS && i >= s.nLayer/8 && i < 7*s.nLayer/8 {
			nt = gguf.TypeIQ3_XXS
		}
		*counter++
	}
	return nt, nil
}

// requiresImatrix is tensor_requires_imatrix (src/llama-quant.cpp): the lattice types that cannot be
// quantized usefully without an importance matrix, and Q2_K inside a Q2_K_S file; never the token embedding
// or the output tensor.
func requiresImatrix(name string, to gguf.Type, ft gguf.FileType) bool {
	if cat := categoryOf(name); cat == catTokenEmbd || cat == catOutput {
		return false
	}
	switch to {
	case gguf.TypeIQ3_XXS, gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ2_S, gguf.TypeIQ1_M, gguf.TypeIQ1_S:
		return true
	case gguf.TypeQ2_K:
		return ft == gguf.FileTypeQ2_K_S
	}
	return false
}

// fallback is tensor_type_fallback: a type whose block does not divide the row length is replaced by a
// 32-element type, or F16 when even that does not divide it.
func (s *planState) fallback(t in, want gguf.Type) (gguf.Type, string, error) {
	bs := want.BlockSize()
	if t.ne0%bs == 0 {
		return want, "", nil
	}
	s.nFallback++
	var got gguf.Type
	switch want {
	case gguf.TypeIQ1_S, gguf.TypeIQ1_M, gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ2_S, gguf.TypeIQ3_XXS,
		gguf.TypeIQ3_S, gguf.TypeIQ4_XS:
		got = gguf.TypeIQ4_NL
	case gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeTQ1_0, gguf.TypeTQ2_0:
		got = gguf.TypeQ4_0
	case gguf.TypeQ4_K:
		got = gguf.TypeQ5_0
	case gguf.TypeQ5_K:
		got = gguf.TypeQ5_1
	case gguf.TypeQ6_K:
		got = gguf.TypeQ8_0
	default:
		return 0, "", fmt.Errorf("quantize: tensor %q: row of %d values is not a multiple of the %s block size %d, "+
			"and %s has no fallback type", t.Name, t.ne0, want, bs, want)
	}
	if t.ne0%got.BlockSize() != 0 {
		got = gguf.TypeF16
	}
	return got, fmt.Sprintf("row %d not a multiple of %s block %d: %s", t.ne0, want, bs, got), nil
}
