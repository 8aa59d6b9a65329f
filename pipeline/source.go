package pipeline

import "context"

// TensorInfo describes a tensor of a Hugging Face checkpoint: its name as stored, its dtype and its shape in
// PyTorch order (the last dimension varies fastest).
//
// A row is one run of the last dimension (ggml's ne[0], the unit quantization blocks and matrix products work
// in): a tensor of shape [E, out, in] has E·out rows of in values, a 1-D tensor is one row. This is the only
// meaning of "row" in phonellm; the safetensors reader itself reads element ranges.
type TensorInfo struct {
	Name  string  `json:"name"`
	DType DType   `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// RowLen is the length of one row: the last dimension (the whole tensor for 1-D tensors, 1 for a scalar).
func (t TensorInfo) RowLen() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// Rows is the number of rows: the product of every dimension but the last.
func (t TensorInfo) Rows() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.NumElements() / max(t.RowLen(), 1)
}

// TensorSource is a checkpoint read row block by row block, so that no stage holds a whole model (or even a
// whole tensor, where its transform allows) in memory. A safetensors checkpoint implements it, and a LoRA
// merge wraps one to add the adapter's delta on the fly.
type TensorSource interface {
	// Tensors lists every tensor, sorted by name.
	Tensors() []TensorInfo
	// ReadRows decodes rows [row0, row0+n) of the named tensor to float32 into dst (grown if too small) and
	// returns the filled slice of n*RowLen values.
	ReadRows(ctx context.Context, name string, row0, n int64, dst []float32) ([]float32, error)
}
