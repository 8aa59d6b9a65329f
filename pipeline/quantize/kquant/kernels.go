package kquant

// Block loops used by the Format table. They call the vector kernels
// (lanes.go, *_amd64.s) where the CPU has them, else the plain Go fast
// kernels where one exists; the reference kernels stay available to the
// tests, which check every path against them (vector_test.go).

func quantizeQ2K(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastQ2K(dst[i*84:], src[i*256:])
	}
}

func quantizeQ3K(dst []byte, src []float32, nb int) {
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
		refQ6K(dst[i*210:], src[i*256:])
	}
}

func quantizeIQ4NL(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ4NL(dst[i*18:], src[i*32:])
	}
}

func quantizeIQ4XS(dst []byte, src []float32, nb int) {
	for i := 0; i < nb; i++ {
		fastIQ4XS(dst[i*136:], src[i*256:])
	}
}
