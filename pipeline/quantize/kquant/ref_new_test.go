package kquant

// Reference kernels of the formats added with the importance-matrix work,
// for the tests that compare the public kernels with the reference
// (imatrix-free paths; the types that require an importance matrix have
// none).
func init() {
	referenceKernels[TypeIQ3_XXS] = blockLoop(98, 256, func(y []byte, x []float32) { refIQ3XXS(y, x, nil) })
	referenceKernels[TypeIQ3_S] = blockLoop(110, 256, func(y []byte, x []float32) { refIQ3S(y, x, nil) })
	referenceKernels[TypeIQ2_S] = blockLoop(82, 256, func(y []byte, x []float32) { refIQ2S(y, x, nil) })
	referenceKernels[TypeIQ1_M] = blockLoop(56, 256, func(y []byte, x []float32) { refIQ1M(y, x, nil) })
	referenceKernels[TypeTQ1_0] = blockLoop(54, 256, refTQ1_0)
	referenceKernels[TypeTQ2_0] = blockLoop(66, 256, refTQ2_0)
}

// Round-trip bounds (fuzz_test.go) of the imatrix-free paths added with
// these formats, as fractions of the block's largest |x|: loose sanity
// limits. The lattice formats can move a value by more than the block
// maximum (IQ3_XXS stores 7 of 8 signs and flips the cheapest value when the
// parity does not match); ternary values are off by at most half a step.
func init() {
	for id, b := range map[uint32]float64{
		TypeIQ3_XXS: 2.5, TypeIQ3_S: 2.5, TypeIQ2_S: 2.5, TypeIQ1_M: 2.5,
		TypeTQ1_0: 0.51, TypeTQ2_0: 0.51,
	} {
		roundTripBound[id] = b
	}
}
