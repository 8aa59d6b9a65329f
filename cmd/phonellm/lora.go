package main

import (
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/merge"
)

// mergeOnTheFly wraps the input's checkpoint so the adapters are merged as tensors are read: the fused path of
// convert and quantize, which gives the same tensors as `phonellm merge` without a merged checkpoint on disk.
func (m *modelInput) mergeOnTheFly(a *app, refs []adapterRef) error {
	ck, err := checkpoint.Open(m.dir)
	if err != nil {
		return err
	}
	var adapters []merge.Adapter
	closeAll := func() {
		for _, ad := range adapters {
			ad.Close()
		}
		ck.Close()
	}
	for _, r := range refs {
		ad, err := merge.OpenAdapter(r.Path, r.Weight)
		if err != nil {
			closeAll()
			return err
		}
		adapters = append(adapters, ad)
	}
	src, rep, err := merge.Wrap(a.ctx, ck, ck.Config, adapters)
	if err != nil {
		closeAll()
		return err
	}
	reportMerge(a, rep)
	m.source = src
	prev := m.closer
	m.closer = func() {
		closeAll()
		if prev != nil {
			prev()
		}
	}
	return nil
}

// reportMerge tells people what an on-the-fly merge changes.
func reportMerge(a *app, rep *merge.Report) {
	if rep == nil {
		return
	}
	a.io.Printf("merging %d adapted tensors on the fly\n", len(rep.Tensors))
	if rep.Untied {
		a.io.Warnf("the adapter changes the tied embedding/lm_head: writing them untied (separate output tensor)")
	}
	for _, n := range rep.Notes {
		a.reporter().Note(pipeline.Info, n)
	}
}
