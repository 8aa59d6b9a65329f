package tinymodel

// configJSON renders config.json like the released checkpoints' (keys
// sorted, as transformers writes them).
func configJSON(s Spec, t *Tokenizer) ([]byte, error) {
	eot := t.TokenID("<|endoftext|>")
	imEnd := t.TokenID("<|im_end|>")
	torchDtype := "float32"
	if s.DType == BF16 {
		torchDtype = "bfloat16"
	}
	if s.isQwen35() {
		return indentJSON(qwen35Config(s, t, torchDtype))
	}
	c := map[string]any{
		"attention_dropout":       0.0,
		"bos_token_id":            eot,
		"eos_token_id":            imEnd,
		"hidden_act":              "silu",
		"hidden_size":             s.HiddenSize,
		"initializer_range":       0.02,
		"intermediate_size":       s.IntermediateSize,
		"max_position_embeddings": s.MaxPositionEmbeddings,
		"max_window_layers":       s.NumLayers,
		"num_attention_heads":     s.NumHeads,
		"num_hidden_layers":       s.NumLayers,
		"num_key_value_heads":     s.NumKVHeads,
		"rms_norm_eps":            s.RMSNormEps,
		"rope_scaling":            nil,
		"rope_theta":              s.RopeTheta,
		"sliding_window":          nil,
		"tie_word_embeddings":     s.TiedEmbeddings,
		"torch_dtype":             torchDtype,
		"use_cache":               true,
		"use_sliding_window":      false,
		"vocab_size":              s.VocabSize,
	}
	switch s.Arch {
	case Qwen2:
		c["architectures"] = []string{"Qwen2ForCausalLM"}
		c["model_type"] = "qwen2"
		c["sliding_window"] = s.MaxPositionEmbeddings
		c["transformers_version"] = "4.43.1"
	case Qwen3:
		c["architectures"] = []string{"Qwen3ForCausalLM"}
		c["model_type"] = "qwen3"
		c["attention_bias"] = false
		c["head_dim"] = s.HeadDim
		c["transformers_version"] = "4.51.0"
	case Qwen3MoE:
		c["architectures"] = []string{"Qwen3MoeForCausalLM"}
		c["model_type"] = "qwen3_moe"
		c["attention_bias"] = false
		c["head_dim"] = s.HeadDim
		c["decoder_sparse_step"] = 1
		c["mlp_only_layers"] = []int{}
		c["moe_intermediate_size"] = s.MoEIntermediateSize
		c["norm_topk_prob"] = s.NormTopKProb
		c["num_experts"] = s.NumExperts
		c["num_experts_per_tok"] = s.NumExpertsPerTok
		c["output_router_logits"] = false
		c["router_aux_loss_coef"] = 0.001
		c["transformers_version"] = "4.51.0"
	}
	return indentJSON(c)
}

// qwen35Config is the nested Qwen3_5(Moe)ForConditionalGeneration config:
// the language model's fields under text_config, the vision tower's under
// vision_config, multimodal token ids at the root.
func qwen35Config(s Spec, t *Tokenizer, torchDtype string) map[string]any {
	text := map[string]any{
		"attention_bias":               false,
		"attention_dropout":            0.0,
		"attn_output_gate":             true,
		"dtype":                        torchDtype,
		"eos_token_id":                 t.TokenID("<|endoftext|>"),
		"full_attention_interval":      s.FullAttentionInterval,
		"head_dim":                     s.HeadDim,
		"hidden_act":                   "silu",
		"hidden_size":                  s.HiddenSize,
		"initializer_range":            0.02,
		"layer_types":                  s.layerTypes(),
		"linear_conv_kernel_dim":       s.LinearConvKernel,
		"linear_key_head_dim":          s.LinearKeyHeadDim,
		"linear_num_key_heads":         s.LinearNumKeyHeads,
		"linear_num_value_heads":       s.LinearNumValueHeads,
		"linear_value_head_dim":        s.LinearValueHeadDim,
		"mamba_ssm_dtype":              "float32",
		"max_position_embeddings":      s.MaxPositionEmbeddings,
		"mlp_only_layers":              []int{},
		"model_type":                   "qwen3_5_text",
		"mtp_num_hidden_layers":        s.MTPLayers,
		"mtp_use_dedicated_embeddings": false,
		"num_attention_heads":          s.NumHeads,
		"num_hidden_layers":            s.NumLayers,
		"num_key_value_heads":          s.NumKVHeads,
		"rms_norm_eps":                 s.RMSNormEps,
		"rope_parameters": map[string]any{
			"mrope_interleaved":     true,
			"mrope_section":         s.MRoPESection,
			"partial_rotary_factor": s.PartialRotaryFactor,
			"rope_theta":            s.RopeTheta,
			"rope_type":             "default",
		},
		"tie_word_embeddings": s.TiedEmbeddings,
		"use_cache":           true,
		"vocab_size":          s.VocabSize,
	}
	arch := "Qwen3_5ForConditionalGeneration"
	modelType := "qwen3_5"
	if s.Arch == Qwen35MoE {
		arch = "Qwen3_5MoeForConditionalGeneration"
		modelType = "qwen3_5_moe"
		text["model_type"] = "qwen3_5_moe_text"
		text["moe_intermediate_size"] = s.MoEIntermediateSize
		text["shared_expert_intermediate_size"] = s.SharedExpertIntermediateSize
		text["num_experts"] = s.NumExperts
		text["num_experts_per_tok"] = s.NumExpertsPerTok
		text["output_router_logits"] = false
		text["router_aux_loss_coef"] = 0.001
	} else {
		text["intermediate_size"] = s.IntermediateSize
	}
	c := map[string]any{
		"architectures":         []string{arch},
		"image_token_id":        t.TokenID("<|image_pad|>"),
		"model_type":            modelType,
		"text_config":           text,
		"tie_word_embeddings":   s.TiedEmbeddings,
		"torch_dtype":           torchDtype,
		"transformers_version":  "4.57.0.dev0",
		"video_token_id":        t.TokenID("<|video_pad|>"),
		"vision_end_token_id":   t.TokenID("<|vision_end|>"),
		"vision_start_token_id": t.TokenID("<|vision_start|>"),
	}
	if s.Vision {
		c["vision_config"] = map[string]any{
			"deepstack_visual_indexes": []int{},
			"depth":                    1,
			"hidden_act":               "gelu_pytorch_tanh",
			"hidden_size":              visionHidden,
			"in_channels":              3,
			"initializer_range":        0.02,
			"intermediate_size":        visionFFN,
			"model_type":               modelType,
			"num_heads":                2,
			"num_position_embeddings":  visionPositions,
			"out_hidden_size":          s.HiddenSize,
			"patch_size":               visionPatch,
			"spatial_merge_size":       visionMerge,
			"temporal_patch_size":      visionTemporal,
		}
	}
	return c
}

// generationConfigJSON renders generation_config.json (the sampling
// defaults of the released instruct checkpoints).
func generationConfigJSON(s Spec, t *Tokenizer) ([]byte, error) {
	eot, imEnd := t.TokenID("<|endoftext|>"), t.TokenID("<|im_end|>")
	c := map[string]any{
		"bos_token_id": eot,
		"do_sample":    true,
		"eos_token_id": []int{imEnd, eot},
		"pad_token_id": eot,
		"temperature":  0.6,
		"top_k":        20,
		"top_p":        0.95,
	}
	switch s.Arch {
	case Qwen2:
		c["repetition_penalty"] = 1.05
		c["temperature"] = 0.7
		c["top_p"] = 0.8
		c["transformers_version"] = "4.43.1"
	case Qwen3, Qwen3MoE:
		c["transformers_version"] = "4.51.0"
	default:
		c["transformers_version"] = "4.57.0.dev0"
	}
	return indentJSON(c)
}
