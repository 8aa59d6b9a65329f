//go:build !amd64

package merge

func lowRankVec(x, u, v []float64) int { return 0 }

func lowRank4Vec(x, u, v []float64, n, cols, r int) int { return 0 }

func encodeBF16Vec(dst []byte, x []float64) int { return 0 }

func decodeBF16Vec(dst []float64, b []byte) int { return 0 }

func lowRank32x4Vec(x, u, v []float32, n, cols, r int, g *guard) int { return 0 }

func decodeBF16F32Vec(dst []float32, b []byte) int { return 0 }

func encodeF32BF16Vec(dst []byte, x []float32) int { return 0 }

// haveAVX2FMA is false off amd64: every path is the portable Go one.
var haveAVX2FMA = false

func fusedBF16Rows(dst, src []byte, u, v []float32, n, cols, r int, g *guard) int { return 0 }
