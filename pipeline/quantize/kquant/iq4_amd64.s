//go:build !purego

#include "textflag.h"

// The IQ4_NL/IQ4_XS scale search (quantize_row_iq4_nl_impl with no weights
// and ntry = 7, ggml-quants.c; iq4Search in fast_iq4.go) on 8 blocks of 32
// values at once, one block per lane, in the qkx2Lanes layout. Every lane
// performs iq4Search's float32 operations in the same order; the table
// search is bestIndexIQ4's binary search over twice the midpoints, its
// thresholds picked per lane with VPERMPS. Go asm operand order as in
// qkx2_amd64.s; VPERMPS t, i, d is d[k] = t[i[k] & 7].

// Offsets in qkx2Lanes and iq4Tables (checked by TestLaneLayouts).
#define QX 0
#define QW 1024
#define QMAX 4096
#define QBEST 4192
#define QSCALE 4224
#define QDEAD 4288
#define TKVLO 0
#define TKVHI 32
#define TT3 64
#define TT4 96
#define TC8 128
#define TC4 160
#define TDIFF 192
#define TI8 224
#define TI4 256
#define TI2 288
#define TTRY 320

DATA iqAbs<>+0(SB)/4, $0x7FFFFFFF
GLOBL iqAbs<>(SB), RODATA|NOPTR, $4
DATA iqEps<>+0(SB)/4, $0x26901D7D // 1e-15f (GROUP_MAX_EPS)
GLOBL iqEps<>(SB), RODATA|NOPTR, $4
DATA iqM127<>+0(SB)/4, $0xC2FE0000 // -127.0f (kvalues_iq4nl[0])
GLOBL iqM127<>(SB), RODATA|NOPTR, $4
DATA iqOne<>+0(SB)/4, $0x3F800000
GLOBL iqOne<>(SB), RODATA|NOPTR, $4
DATA iqSign<>+0(SB)/4, $0x80000000
GLOBL iqSign<>(SB), RODATA|NOPTR, $4

// Registers: Y15/Y14 kvalues 0-7/8-15, Y13/Y12 the level-3/4 thresholds,
// Y11 the level-1 threshold, Y10/Y9/Y8 int 8/4/2, Y7 id, Y6 sum_qx,
// Y5 sum_q2, Y0-Y4 scratch.

// IQ4ELEM(o): q = kvalues[best_index(id*x)] for the row at byte offset o,
// sum_qx += (w*q)*x, sum_q2 += (w*q)*q.
#define IQ4ELEM(o) \
	VMULPS    QX+o(DI), Y7, Y0; \
	VADDPS    Y0, Y0, Y0; \
	VCMPPS    $0x1D, Y11, Y0, Y1; \
	VANDPS    Y10, Y1, Y2; \
	VANDPS    TDIFF(SI), Y1, Y3; \
	VADDPS    TC4(SI), Y3, Y3; \
	VCMPPS    $0x1D, Y3, Y0, Y3; \
	VANDPS    Y9, Y3, Y3; \
	VPOR      Y3, Y2, Y2; \
	VPSRLD    $2, Y2, Y3; \
	VPERMPS   Y13, Y3, Y3; \
	VCMPPS    $0x1D, Y3, Y0, Y3; \
	VANDPS    Y8, Y3, Y3; \
	VPOR      Y3, Y2, Y2; \
	VPSRLD    $1, Y2, Y3; \
	VPERMPS   Y12, Y3, Y3; \
	VCMPPS    $0x1D, Y3, Y0, Y3; \
	VPSUBD    Y3, Y2, Y2; \
	VPERMPS   Y15, Y2, Y3; \
	VPERMPS   Y14, Y2, Y4; \
	VBLENDVPS Y1, Y4, Y3, Y3; \
	VMULPS    QW+o(DI), Y3, Y4; \
	VMULPS    QX+o(DI), Y4, Y0; \
	VADDPS    Y0, Y6, Y6; \
	VMULPS    Y3, Y4, Y4; \
	VADDPS    Y4, Y5, Y5

#define IQ4ROWS \
	IQ4ELEM(0); IQ4ELEM(32); IQ4ELEM(64); IQ4ELEM(96); \
	IQ4ELEM(128); IQ4ELEM(160); IQ4ELEM(192); IQ4ELEM(224); \
	IQ4ELEM(256); IQ4ELEM(288); IQ4ELEM(320); IQ4ELEM(352); \
	IQ4ELEM(384); IQ4ELEM(416); IQ4ELEM(448); IQ4ELEM(480); \
	IQ4ELEM(512); IQ4ELEM(544); IQ4ELEM(576); IQ4ELEM(608); \
	IQ4ELEM(640); IQ4ELEM(672); IQ4ELEM(704); IQ4ELEM(736); \
	IQ4ELEM(768); IQ4ELEM(800); IQ4ELEM(832); IQ4ELEM(864); \
	IQ4ELEM(896); IQ4ELEM(928); IQ4ELEM(960); IQ4ELEM(992)

// func iq4Lanes32AVX2(st *qkx2Lanes, t *iq4Tables, weighted bool)
//
// Returns in st.scale the scale iq4Search finds for each of the 8 blocks
// of 32 values in st.x (0 where the largest |x| is below GROUP_MAX_EPS),
// with the weights x*x or, if weighted, those in st.w (iq4SearchWeighted).
TEXT ·iq4Lanes32AVX2(SB), NOSPLIT, $0-17
	MOVQ st+0(FP), DI
	MOVQ t+8(FP), SI
	MOVBLZX weighted+16(FP), R8

	// weight = x*x unless given; max = the value of largest magnitude
	// (first wins).
	VBROADCASTSS iqAbs<>(SB), Y4
	VXORPS  Y1, Y1, Y1
	VXORPS  Y2, Y2, Y2
	XORQ    BX, BX

wmax:
	VMOVUPS   QX(DI)(BX*1), Y0
	TESTQ     R8, R8
	JNZ       wgiven
	VMULPS    Y0, Y0, Y3
	VMOVUPS   Y3, QW(DI)(BX*1)

wgiven:
	VANDPS    Y4, Y0, Y3
	VCMPPS    $0x1E, Y1, Y3, Y5
	VBLENDVPS Y5, Y3, Y1, Y1
	VBLENDVPS Y5, Y0, Y2, Y2
	ADDQ      $32, BX
	CMPQ      BX, $1024
	JLT       wmax
	VMOVUPS   Y2, QMAX(DI)
	VBROADCASTSS iqEps<>(SB), Y3
	VCMPPS    $0x11, Y3, Y1, Y3     // amax < GROUP_MAX_EPS
	VMOVUPS   Y3, QDEAD(DI)

	VMOVUPS TKVLO(SI), Y15
	VMOVUPS TKVHI(SI), Y14
	VMOVUPS TT3(SI), Y13
	VMOVUPS TT4(SI), Y12
	VMOVUPS TC8(SI), Y11
	VMOVUPS TI8(SI), Y10
	VMOVUPS TI4(SI), Y9
	VMOVUPS TI2(SI), Y8

	// d = -max / -127, id = 1/d; the first pass.
	VBROADCASTSS iqSign<>(SB), Y0
	VXORPS       Y0, Y2, Y0
	VBROADCASTSS iqM127<>(SB), Y1
	VDIVPS       Y1, Y0, Y0
	VBROADCASTSS iqOne<>(SB), Y1
	VDIVPS       Y0, Y1, Y7
	VXORPS       Y6, Y6, Y6
	VXORPS       Y5, Y5, Y5
	IQ4ROWS
	// d = sum_q2 > 0 ? sum_qx/sum_q2 : 0; best = d*sum_qx.
	VXORPS  Y0, Y0, Y0
	VCMPPS  $0x1E, Y0, Y5, Y1
	VDIVPS  Y5, Y6, Y2
	VANDPS  Y1, Y2, Y2
	VMOVUPS Y2, QSCALE(DI)
	VMULPS  Y6, Y2, Y2
	VMOVUPS Y2, QBEST(DI)

	XORQ CX, CX

try:
	VBROADCASTSS TTRY(SI)(CX*4), Y0
	VDIVPS  QMAX(DI), Y0, Y7        // id = (itry - 127)/max
	VXORPS  Y6, Y6, Y6
	VXORPS  Y5, Y5, Y5
	IQ4ROWS
	// Accept where sum_q2 > 0 && sum_qx*sum_qx > best*sum_q2.
	VXORPS    Y0, Y0, Y0
	VCMPPS    $0x1E, Y0, Y5, Y3
	VMULPS    Y6, Y6, Y1
	VMOVUPS   QBEST(DI), Y4
	VMULPS    Y5, Y4, Y2
	VCMPPS    $0x1E, Y2, Y1, Y1
	VANDPS    Y1, Y3, Y3
	VDIVPS    Y5, Y6, Y1
	VMOVUPS   QSCALE(DI), Y2
	VBLENDVPS Y3, Y1, Y2, Y2
	VMOVUPS   Y2, QSCALE(DI)
	VMULPS    Y6, Y1, Y1
	VBLENDVPS Y3, Y1, Y4, Y4
	VMOVUPS   Y4, QBEST(DI)
	INCQ CX
	CMPQ CX, $15
	JLT  try

	// Lanes below GROUP_MAX_EPS: scale 0.
	VMOVUPS   QDEAD(DI), Y1
	VXORPS    Y0, Y0, Y0
	VMOVUPS   QSCALE(DI), Y2
	VBLENDVPS Y1, Y0, Y2, Y2
	VMOVUPS   Y2, QSCALE(DI)
	VZEROUPPER
	RET

// IQ4IDX(o): the byte indices best_index(id*x) of 8 values at byte offset
// o of SI into Y1 (as dwords). A NaN (id is NaN when a scale is) gets
// index 15, as bestIndexIQ4 gives it.
#define IQ4IDX(o) \
	VMULPS    o(SI), Y7, Y0; \
	VADDPS    Y0, Y0, Y0; \
	VCMPPS    $0x1D, Y11, Y0, Y1; \
	VANDPS    Y10, Y1, Y2; \
	VANDPS    TDIFF(DX), Y1, Y3; \
	VADDPS    TC4(DX), Y3, Y3; \
	VCMPPS    $0x1D, Y3, Y0, Y3; \
	VANDPS    Y9, Y3, Y3; \
	VPOR      Y3, Y2, Y2; \
	VPSRLD    $2, Y2, Y3; \
	VPERMPS   Y13, Y3, Y3; \
	VCMPPS    $0x1D, Y3, Y0, Y3; \
	VANDPS    Y8, Y3, Y3; \
	VPOR      Y3, Y2, Y2; \
	VPSRLD    $1, Y2, Y3; \
	VPERMPS   Y12, Y3, Y3; \
	VCMPPS    $0x1D, Y3, Y0, Y3; \
	VPSUBD    Y3, Y2, Y1; \
	VCMPPS    $0x03, Y0, Y0, Y3; \
	VPSRLD    $28, Y3, Y3; \
	VPOR      Y3, Y1, Y1

// func iq4IndexAVX2(dst *byte, x *float32, id float32, t *iq4Tables)
//
// dst[j] = best_index_int8(kvalues_iq4nl, id*x[j]) for 32 values, packed
// as IQ4's nibbles: dst[j] = L[j] | L[j+16]<<4 for j < 16.
TEXT ·iq4IndexAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS id+16(FP), Y7
	MOVQ t+24(FP), DX
	VMOVUPS TT3(DX), Y13
	VMOVUPS TT4(DX), Y12
	VMOVUPS TC8(DX), Y11
	VMOVUPS TI8(DX), Y10
	VMOVUPS TI4(DX), Y9
	VMOVUPS TI2(DX), Y8
	IQ4IDX(0)
	VMOVDQU Y1, Y4
	IQ4IDX(64)
	VPSLLD  $4, Y1, Y1
	VPOR    Y1, Y4, Y4
	IQ4IDX(32)
	VMOVDQU Y1, Y5
	IQ4IDX(96)
	VPSLLD  $4, Y1, Y1
	VPOR    Y1, Y5, Y5
	VPACKUSDW Y5, Y4, Y4
	VPERMQ  $0xD8, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPACKUSWB X5, X4, X4
	VMOVDQU X4, (DI)
	VZEROUPPER
	RET
