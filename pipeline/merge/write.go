package merge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// The output stage is one pipeline over every tensor of every shard, so that no core waits at tensor
// boundaries: a producer cuts the output into jobs (row blocks of changed tensors, pieces of unchanged
// ones), up to threads workers fill their buffers (computing, or copying the stored bytes), and the caller's
// goroutine writes the buffers in order into the shard writers, which hash them as they go. At most
// threads jobs are being filled and 2·threads wait to be written.

// rawPiece is the size of the pieces unchanged tensors are copied in.
const rawPiece = 4 << 20

// job is a piece of the output, filled by a worker and written in order.
type job struct {
	shard       int
	t           safetensors.WriteInfo
	raw         bool  // copy the base's stored bytes [off, off+n) of the tensor
	off, n      int64 // raw: bytes; changed: rows
	first, last bool  // of its tensor
	lastOfShard bool

	out  []byte
	buf  *[]byte
	err  error
	done chan struct{}
}

// output is the writing end: the shards, the writer of the current one and the background commits.
type output struct {
	ctx     context.Context
	src     *Source
	raw     *safetensors.Checkpoint
	dir     string
	shards  [][]safetensors.WriteInfo
	names   []string
	rep     pipeline.Reporter
	w       *safetensors.Writer
	s       io.Writer // the current tensor's stream
	files   []pipeline.Artifact
	commits sync.WaitGroup
	errs    []error
}

// writeShards writes every tensor of src into safetensors shards in dir and returns the files.
func writeShards(ctx context.Context, src *Source, raw *safetensors.Checkpoint, dir string, maxShard int64, threads int, rep pipeline.Reporter) ([]pipeline.Artifact, int64, error) {
	infos := src.Tensors()
	plan := make([]safetensors.WriteInfo, len(infos))
	var total int64
	for i, t := range infos {
		plan[i] = safetensors.WriteInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}
		total += plan[i].Size()
	}
	shards := safetensors.PlanShards(plan, maxShard)
	o := &output{src: src, raw: raw, dir: dir, shards: shards, names: safetensors.ShardNames(len(shards)), rep: rep,
		files: make([]pipeline.Artifact, len(shards)), errs: make([]error, len(shards))}
	step := "merge"
	rep.Begin(step, total)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o.ctx = ctx
	queue := make(chan *job, 2*threads)
	go produce(ctx, src, raw, shards, threads, queue)
	var werr error
	for j := range queue {
		<-j.done
		if werr == nil {
			if werr = o.write(j); werr != nil {
				cancel() // the producer stops; the jobs already queued are drained
			}
		}
		if j.buf != nil {
			src.outs.put(j.buf)
		}
	}
	if o.w != nil {
		o.w.Abort()
	}
	if werr == nil {
		werr = ctx.Err()
	}
	o.commits.Wait()
	if werr == nil {
		werr = errors.Join(o.errs...)
	}
	files := o.files
	if werr == nil && len(shards) > 1 {
		if werr = safetensors.WriteIndex(dir, shards, o.names, total); werr == nil {
			var a pipeline.Artifact
			if a, werr = artifact(filepath.Join(dir, safetensors.IndexFileName), "checkpoint"); werr == nil {
				files = append(files, a)
			}
		}
	}
	rep.End(step, werr)
	if werr != nil {
		return nil, 0, werr
	}
	return files, total, nil
}

// write writes one filled job, opening the shard's writer and the tensor's stream as needed, and commits
// the shard (in the background) after its last job.
func (o *output) write(j *job) error {
	if j.err != nil {
		return j.err
	}
	if o.w == nil {
		path := filepath.Join(o.dir, o.names[j.shard])
		w, err := safetensors.CreateWith(path, o.shards[j.shard], map[string]string{"format": "pt"}, safetensors.WriterOptions{Direct: true})
		if err != nil {
			return err
		}
		o.w = w
	}
	if j.first {
		s, err := o.w.StreamTensor(j.t.Name)
		if err != nil {
			return err
		}
		o.s = s
	}
	if _, err := o.s.Write(j.out); err != nil {
		return err
	}
	o.rep.Add(int64(len(j.out)))
	if bm, off, end := o.baseRange(j); bm != nil {
		if err := bm.used(o.ctx, off, end); err != nil {
			return err
		}
	}
	if j.last && !j.raw {
		o.src.Release(j.t.Name)
	}
	if j.lastOfShard {
		w, si := o.w, j.shard
		path := filepath.Join(o.dir, o.names[si])
		o.w, o.s = nil, nil
		o.commits.Add(1)
		go func() {
			defer o.commits.Done()
			if o.errs[si] = w.Commit(); o.errs[si] == nil {
				o.files[si] = pipeline.Artifact{Path: path, Kind: "checkpoint", Size: w.Size(), SHA256: w.SHA256()}
			}
		}()
	}
	return nil
}

// baseRange returns the mapped base file and byte range a written job used, if any.
func (o *output) baseRange(j *job) (*baseMap, int64, int64) {
	if o.src.maps == nil {
		return nil, 0, 0
	}
	name := j.t.Name
	if !j.raw {
		pl := o.src.plans[name]
		if pl == nil || !fastPlan(pl) {
			return nil, 0, 0
		}
		name = pl.src
	}
	ti, ok := o.raw.Tensor(name)
	bm := o.src.maps.file(ti.File)
	if !ok || bm == nil {
		return nil, 0, 0
	}
	if j.raw {
		return bm, ti.Offset + j.off, ti.Offset + j.off + j.n
	}
	rowBytes := int64(len(j.out)) / max(j.n, 1)
	return bm, ti.Offset + j.off*rowBytes, ti.Offset + (j.off+j.n)*rowBytes
}

// produce cuts the shards into jobs, starts a worker on each (at most threads at a time) and queues them in
// order. It closes queue when done or when ctx is.
func produce(ctx context.Context, src *Source, raw *safetensors.Checkpoint, shards [][]safetensors.WriteInfo, threads int, queue chan<- *job) {
	defer close(queue)
	sem := make(chan struct{}, threads)
	emit := func(j *job) bool {
		j.done = make(chan struct{})
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		go func() {
			defer func() { <-sem; close(j.done) }()
			j.err = fill(ctx, src, raw, j)
		}()
		select {
		case queue <- j:
			return true
		case <-ctx.Done():
			<-j.done
			if j.buf != nil {
				src.outs.put(j.buf)
			}
			return false
		}
	}
	for si, sh := range shards {
		for ti, t := range sh {
			_, inBase := raw.Tensor(t.Name)
			isRaw := inBase && !src.Changed(t.Name)
			size, step := t.Size(), int64(rawPiece)
			if !isRaw {
				pl := src.plans[t.Name]
				if pl == nil {
					size, step = 0, 1 // fill reports the error
				} else {
					size = pl.info.Rows()
					step = max(1, int64(src.blockBytes)/(4*max(pl.info.RowLen(), 1)))
				}
			}
			for off := int64(0); off == 0 || off < size; off += step {
				j := &job{shard: si, t: t, raw: isRaw, off: off, n: min(step, size-off), first: off == 0, last: off+step >= size}
				j.lastOfShard = j.last && ti == len(sh)-1
				if !emit(j) {
					return
				}
			}
		}
	}
}

// fill computes or copies one job into a buffer.
func fill(ctx context.Context, src *Source, raw *safetensors.Checkpoint, j *job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if j.raw {
		ti, _ := raw.Tensor(j.t.Name)
		j.buf = src.outs.get(j.n)
		j.out = *j.buf
		if bm := src.maps.file(ti.File); bm != nil {
			b, err := bm.bytes(ti.Offset+j.off, j.n)
			if err != nil {
				return err
			}
			return bm.guard(func() error { copy(j.out, b); return nil })
		}
		r, err := raw.Raw(j.t.Name)
		if err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		if _, err := r.ReadAt(j.out, j.off); err != nil {
			return fmt.Errorf("merge: copy tensor %q: %w", j.t.Name, err)
		}
		return nil
	}
	pl := src.plans[j.t.Name]
	if pl == nil {
		return fmt.Errorf("merge: tensor %q is neither in the base nor changed by the merge", j.t.Name)
	}
	cols := pl.info.RowLen()
	es := j.t.DType.Bits() / 8
	j.buf = src.outs.get(j.n * cols * es)
	j.out = *j.buf
	if fastPlan(pl) {
		return src.rows16(ctx, pl, j.off, j.n, j.out)
	}
	return src.rows(ctx, pl, j.off, j.n, func(x []float64) error {
		if i := encodeBlock(j.t.DType, j.out, x); i >= 0 {
			return notFinite(pl, j.off, cols, i, x[i])
		}
		return nil
	})
}

func artifact(path, kind string) (pipeline.Artifact, error) {
	n, sum, err := fsx.HashFile(path)
	if err != nil {
		return pipeline.Artifact{}, fmt.Errorf("merge: %w", err)
	}
	return pipeline.Artifact{Path: path, Kind: kind, Size: n, SHA256: sum}, nil
}

var f32Pool = sync.Pool{New: func() any { return new([]float32) }}
