package kquant

// Block loops used by the Format table. They call the vector kernels
// (lanes.go, *_amd64.s) where the CPU has them, else the plain Go fast
// kernels where one exists; the reference kernels stay available to the
// tests, which check every path against them (vector_test.go).

func quantizeQ2K(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ2KLanes(dst, src, nb)
		return
	}
	quantizeQ2KGo(dst, src, nb)
}

func quantizeQ2KGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastQ2K(dst[i*84:], src[i*256:])
	}
}

func quantizeQ3K(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ3KLanes(dst, src, nb)
		return
	}
	quantizeQ3KGo(dst, src, nb)
}

func quantizeQ3KGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		refQ3K(dst[i*110:], src[i*256:])
	}
}

func quantizeQ4K(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ4KLanes(dst, src, nb)
		return
	}
	quantizeQ4KGo(dst, src, nb)
}

func quantizeQ4KGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastQ4K(dst[i*144:], src[i*256:])
	}
}

func quantizeQ5K(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ5KLanes(dst, src, nb)
		return
	}
	quantizeQ5KGo(dst, src, nb)
}

func quantizeQ5KGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastQ5K(dst[i*176:], src[i*256:])
	}
}

func quantizeQ6K(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ6KLanes(dst, src, nb)
		return
	}
	quantizeQ6KGo(dst, src, nb)
}

func quantizeQ6KGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastQ6K(dst[i*210:], src[i*256:])
	}
}

func quantizeIQ4NL(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeIQ4NLLanes(dst, src, nb)
		return
	}
	quantizeIQ4NLGo(dst, src, nb)
}

func quantizeIQ4NLGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ4NL(dst[i*18:], src[i*32:])
	}
}

func quantizeIQ4XS(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeIQ4XSLanes(dst, src, nb)
		return
	}
	quantizeIQ4XSGo(dst, src, nb)
}

func quantizeIQ4XSGo(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ4XS(dst[i*136:], src[i*256:])
	}
}

func quantizeQ4_0(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ4_0AVX2(dst, src, nb)
		return
	}
	refQ4_0(dst, src, nb)
}

func quantizeQ8_0(dst []byte, src []float32, nb int) {
	if useAVX2 {
		quantizeQ8_0AVX2(dst, src, nb)
		return
	}
	refQ8_0(dst, src, nb)
}

// quantizeQ4_0AVX2 runs the vector kernel and the scalar one on each block
// it stops at (a block with a NaN or Inf).
func quantizeQ4_0AVX2(dst []byte, src []float32, nb int) {
	if nb == 0 {
		return
	}
	_ = src[nb*32-1]
	_ = dst[nb*18-1]
	for i := 0; i < nb; {
		i += q4_0AVX2(&dst[i*18], &src[i*32], nb-i)
		if i < nb {
			refQ4_0(dst[i*18:], src[i*32:], 1)
			i++
		}
	}
}

func quantizeQ8_0AVX2(dst []byte, src []float32, nb int) {
	if nb == 0 {
		return
	}
	_ = src[nb*32-1]
	_ = dst[nb*34-1]
	for i := 0; i < nb; {
		i += q8_0AVX2(&dst[i*34], &src[i*32], nb-i)
		if i < nb {
			refQ8_0(dst[i*34:], src[i*32:], 1)
			i++
		}
	}
}
