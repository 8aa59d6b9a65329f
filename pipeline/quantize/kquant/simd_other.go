//go:build !amd64 || purego

package kquant

// Without the amd64 vector kernels every format runs its plain Go kernel.
const useAVX2 = false

func qkx2Lanes32AVX2(*qkx2Lanes, int, int, bool) { panic("kquant: no vector kernels in this build") }

func qkx2Lanes16AVX2(*qkx2Lanes, int, int, bool, bool) {
	panic("kquant: no vector kernels in this build")
}

func qx16LanesAVX2(*qx16Lanes, *[18]float32, bool, int) {
	panic("kquant: no vector kernels in this build")
}

func q8_0AVX2(*byte, *float32, int) int { panic("kquant: no vector kernels in this build") }

func q4_0AVX2(*byte, *float32, int) int { panic("kquant: no vector kernels in this build") }

func iq4Lanes32AVX2(*qkx2Lanes, *iq4Tables, bool) { panic("kquant: no vector kernels in this build") }

func iq4IndexAVX2(*byte, *float32, float32, *iq4Tables) {
	panic("kquant: no vector kernels in this build")
}

func q3LanesAVX2(*qx16Lanes) { panic("kquant: no vector kernels in this build") }

func transpose32AVX2(*[32][8]float32, *[256]float32) bool {
	panic("kquant: no vector kernels in this build")
}

func transpose16AVX2(*[16][16]float32, *[256]float32) bool {
	panic("kquant: no vector kernels in this build")
}

func transpose16x8AVX2(*[32][8]float32, *[128]float32) bool {
	panic("kquant: no vector kernels in this build")
}

func requantAVX2(*byte, *float32, int, float32, float32, int, int, int) {
	panic("kquant: no vector kernels in this build")
}
