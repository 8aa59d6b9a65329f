//go:build !purego

#include "textflag.h"

// make_qkx2_quants (ggml-quants.c) on 8 sub-blocks of 32 values at once,
// one sub-block per lane of a YMM register: every lane performs the float32
// operations of qkx2Fast32 / makeQKX2Quants for its sub-block in the same
// order (sums accumulate element 0, 1, …, 31; products are rounded before
// they are added: VMULPS then VADDPS, never FMA). Go asm operand order:
// VSUBPS b, a, d is d = a - b; VCMPPS $p, b, a, d is d = a p b;
// VMINPS b, a, d is d = a < b ? a : b (so "if v < m { m = v }" is
// VMINPS m, v, m); VBLENDVPS m, b, a, d is d = m ? b : a.

// Offsets in qkx2Lanes (checked by TestLaneLayouts).
#define QX 0
#define QW 1024
#define QL 2048
#define QLAUX 3072
#define QMAX 4096
#define QSUMW 4128
#define QSUMX 4160
#define QBEST 4192
#define QSCALE 4224
#define QMIN 4256
#define QDEAD 4288
#define QNUM 4320

DATA qkMagic<>+0(SB)/4, $0x4B400000 // 12582912.0f (nearest_int)
GLOBL qkMagic<>(SB), RODATA|NOPTR, $4
DATA qkMant<>+0(SB)/4, $0x007FFFFF
GLOBL qkMant<>(SB), RODATA|NOPTR, $4
DATA qkOff<>+0(SB)/4, $0x00400000
GLOBL qkOff<>(SB), RODATA|NOPTR, $4
DATA qkAbs<>+0(SB)/4, $0x7FFFFFFF
GLOBL qkAbs<>(SB), RODATA|NOPTR, $4
DATA qkSign<>+0(SB)/4, $0x80000000
GLOBL qkSign<>(SB), RODATA|NOPTR, $4
DATA qkOne<>+0(SB)/4, $0x3F800000 // 1.0f
GLOBL qkOne<>(SB), RODATA|NOPTR, $4
DATA qk32<>+0(SB)/4, $0x42000000 // 32.0f
GLOBL qk32<>(SB), RODATA|NOPTR, $4

// Register use in the search:
//   Y15 nmax (int32)   Y14 magic   Y13 mantissa mask   Y12 0x400000
//   Y11 zero           Y10 min_    Y9 iscale
//   Y8 sum_l           Y7 sum_l2   Y6 sum_xl          Y0-Y5 temporaries

// NEAREST(T): T = clamp(nearest_int(T), 0, nmax) in place.
#define NEAREST(T) \
	VADDPS  Y14, T, T; \
	VPAND   Y13, T, T; \
	VPSUBD  Y12, T, T; \
	VPMINSD Y15, T, T; \
	VPMAXSD Y11, T, T

// STEPELEM(o): levels of element o/32 for this step's iscale, stored in
// laux, and the three sums (w*l, w*l*l, w*l*x) accumulated.
#define STEPELEM(o) \
	VMOVUPS   QX+o(DI), Y0; \
	VSUBPS    Y10, Y0, Y1; \
	VMULPS    Y1, Y9, Y1; \
	NEAREST(Y1); \
	VMOVDQU   Y1, QLAUX+o(DI); \
	VCVTDQ2PS Y1, Y2; \
	VMULPS    QW+o(DI), Y2, Y3; \
	VADDPS    Y3, Y8, Y8; \
	VMULPS    Y2, Y3, Y4; \
	VADDPS    Y4, Y7, Y7; \
	VMULPS    Y0, Y3, Y4; \
	VADDPS    Y4, Y6, Y6

// ERRELEM(o): cur_error += w * (scale*l + min - x)^2 for element o/32
// (Y5 scale, Y4 min, Y3 cur_error).
#define ERRELEM(o) \
	VCVTDQ2PS QLAUX+o(DI), Y0; \
	VMULPS    Y0, Y5, Y0; \
	VADDPS    Y4, Y0, Y0; \
	VSUBPS    QX+o(DI), Y0, Y0; \
	VMULPS    Y0, Y0, Y0; \
	VMULPS    QW+o(DI), Y0, Y0; \
	VADDPS    Y0, Y3, Y3

// ERR8(o): eight ERRELEMs from element o/32.
#define ERR8(o) \
	ERRELEM(o); ERRELEM(o+32); ERRELEM(o+64); ERRELEM(o+96); \
	ERRELEM(o+128); ERRELEM(o+160); ERRELEM(o+192); ERRELEM(o+224)

// KEEP(o): L = accepted ? laux : L for element o/32 (mask in Y1).
#define KEEP(o) \
	VMOVUPS   QL+o(DI), Y0; \
	VBLENDVPS Y1, QLAUX+o(DI), Y0, Y0; \
	VMOVUPS   Y0, QL+o(DI)

#define KEEP8(o) \
	KEEP(o); KEEP(o+32); KEEP(o+64); KEEP(o+96); \
	KEEP(o+128); KEEP(o+160); KEEP(o+192); KEEP(o+224)

// func qkx2Lanes32AVX2(st *qkx2Lanes, nmax int, nstep int, weighted bool)
//
// Unless weighted, fills st.w with the Q4_K/Q5_K weights av_x + |x|
// (av_x = sqrtf(sum x^2 / 32)); then runs make_qkx2_quants(32, nmax, x, w,
// L, Laux, rmin, rdelta, nstep, false) for the 8 lanes; st.num[is] must
// hold rmin + rdelta*is + nmax as the C code computes it. Outputs st.L,
// st.scale and st.min (the returned -min). The error sums stop early once
// no lane can improve, which needs weights >= 0 (or NaN): callers passing
// their own weights check that.
TEXT ·qkx2Lanes32AVX2(SB), NOSPLIT, $0-25
	MOVQ st+0(FP), DI
	MOVQ nmax+8(FP), AX
	MOVQ nstep+16(FP), CX

	VBROADCASTSS qkMagic<>(SB), Y14
	VBROADCASTSS qkMant<>(SB), Y13
	VBROADCASTSS qkOff<>(SB), Y12
	VXORPS       Y11, Y11, Y11
	MOVQ         AX, X15
	VPBROADCASTD X15, Y15

	// Weights: sum_x2 over the 32 values, av_x = sqrtf(sum_x2/32),
	// w = av_x + |x|.
	MOVBLZX weighted+24(FP), BX
	TESTQ  BX, BX
	JNZ    minmax
	VXORPS Y0, Y0, Y0
	XORQ   BX, BX

wsum:
	VMOVUPS QX(DI)(BX*1), Y1
	VMULPS  Y1, Y1, Y1
	VADDPS  Y1, Y0, Y0
	ADDQ    $32, BX
	CMPQ    BX, $1024
	JLT     wsum
	VBROADCASTSS qk32<>(SB), Y1
	VDIVPS  Y1, Y0, Y0
	VSQRTPS Y0, Y0
	VBROADCASTSS qkAbs<>(SB), Y2
	XORQ    BX, BX

wfill:
	VMOVUPS QX(DI)(BX*1), Y1
	VANDPS  Y2, Y1, Y1
	VADDPS  Y1, Y0, Y1
	VMOVUPS Y1, QW(DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, $1024
	JLT     wfill

minmax:
	// min, max, sum_w, sum_x.
	VMOVUPS QX(DI), Y10
	VMOVAPS Y10, Y1
	VMOVUPS QW(DI), Y2
	VMULPS  Y10, Y2, Y3
	MOVQ    $32, BX

mm:
	VMOVUPS QX(DI)(BX*1), Y0
	VMINPS  Y10, Y0, Y10
	VMAXPS  Y1, Y0, Y1
	VMOVUPS QW(DI)(BX*1), Y4
	VADDPS  Y4, Y2, Y2
	VMULPS  Y0, Y4, Y4
	VADDPS  Y4, Y3, Y3
	ADDQ    $32, BX
	CMPQ    BX, $1024
	JLT     mm
	VMINPS  Y10, Y11, Y10        // if min > 0 { min = 0 }
	VMOVUPS Y1, QMAX(DI)
	VMOVUPS Y2, QSUMW(DI)
	VMOVUPS Y3, QSUMX(DI)
	VCMPPS  $0x00, Y10, Y1, Y0   // max == min (EQ_OQ)
	VMOVUPS Y0, QDEAD(DI)

	// Initial levels with iscale = nmax/(max-min), scale = 1/iscale.
	VSUBPS   Y10, Y1, Y1
	VCVTDQ2PS Y15, Y0
	VDIVPS   Y1, Y0, Y9
	VBROADCASTSS qkOne<>(SB), Y0
	VDIVPS   Y9, Y0, Y5
	VMOVUPS  Y5, QSCALE(DI)
	VXORPS   Y3, Y3, Y3
	XORQ     BX, BX

init:
	VMOVUPS   QX(DI)(BX*1), Y0
	VSUBPS    Y10, Y0, Y1
	VMULPS    Y1, Y9, Y1
	NEAREST(Y1)
	VMOVDQU   Y1, QL(DI)(BX*1)
	VCVTDQ2PS Y1, Y2
	VMULPS    Y2, Y5, Y2
	VADDPS    Y10, Y2, Y2
	VSUBPS    Y0, Y2, Y2
	VMULPS    Y2, Y2, Y2
	VMULPS    QW(DI)(BX*1), Y2, Y2
	VADDPS    Y2, Y3, Y3
	ADDQ      $32, BX
	CMPQ      BX, $1024
	JLT       init
	VMOVUPS   Y3, QBEST(DI)

	XORQ SI, SI                     // is

step:
	VBROADCASTSS QNUM(DI)(SI*4), Y0
	VMOVUPS QMAX(DI), Y1
	VSUBPS  Y10, Y1, Y1
	VDIVPS  Y1, Y0, Y9              // iscale = num[is] / (max - min)
	VXORPS  Y8, Y8, Y8
	VXORPS  Y7, Y7, Y7
	VXORPS  Y6, Y6, Y6
	STEPELEM(0); STEPELEM(32); STEPELEM(64); STEPELEM(96)
	STEPELEM(128); STEPELEM(160); STEPELEM(192); STEPELEM(224)
	STEPELEM(256); STEPELEM(288); STEPELEM(320); STEPELEM(352)
	STEPELEM(384); STEPELEM(416); STEPELEM(448); STEPELEM(480)
	STEPELEM(512); STEPELEM(544); STEPELEM(576); STEPELEM(608)
	STEPELEM(640); STEPELEM(672); STEPELEM(704); STEPELEM(736)
	STEPELEM(768); STEPELEM(800); STEPELEM(832); STEPELEM(864)
	STEPELEM(896); STEPELEM(928); STEPELEM(960); STEPELEM(992)

	// D = sum_w*sum_l2 - sum_l*sum_l; lanes with D > 0 (and max != min)
	// go on.
	VMOVUPS QSUMW(DI), Y0
	VMULPS  Y7, Y0, Y1
	VMULPS  Y8, Y8, Y2
	VSUBPS  Y2, Y1, Y1              // D
	VCMPPS  $0x1E, Y11, Y1, Y2      // D > 0 (GT_OQ)
	VMOVUPS QDEAD(DI), Y3
	VANDNPS Y2, Y3, Y2              // and not dead
	VMOVMSKPS Y2, AX
	TESTL   AX, AX
	JZ      next
	// this_scale = (sum_w*sum_xl - sum_x*sum_l)/D
	VMULPS  Y6, Y0, Y3
	VMOVUPS QSUMX(DI), Y4
	VMULPS  Y8, Y4, Y5
	VSUBPS  Y5, Y3, Y3
	VDIVPS  Y1, Y3, Y3
	// this_min = (sum_l2*sum_x - sum_l*sum_xl)/D
	VMULPS  Y4, Y7, Y4
	VMULPS  Y6, Y8, Y5
	VSUBPS  Y5, Y4, Y4
	VDIVPS  Y1, Y4, Y4
	// if this_min > 0 { this_min = 0; this_scale = sum_xl/sum_l2 }
	VCMPPS    $0x1E, Y11, Y4, Y0
	VDIVPS    Y7, Y6, Y5
	VBLENDVPS Y0, Y5, Y3, Y5        // Y5 = this_scale
	VBLENDVPS Y0, Y11, Y4, Y4       // Y4 = this_min
	VMOVAPS   Y2, Y8                // Y8 = live mask (sums no longer needed)
	VMOVUPS   QBEST(DI), Y7         // Y7 = best_error
	VXORPS    Y3, Y3, Y3            // cur_error
	// The error terms are >= 0 or NaN, so the running sum never decreases:
	// after each 8 elements, stop when no live lane is still below best.
	ERR8(0)
	VCMPPS    $0x11, Y7, Y3, Y1     // cur < best (LT_OQ)
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next
	ERR8(256)
	VCMPPS    $0x11, Y7, Y3, Y1
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next
	ERR8(512)
	VCMPPS    $0x11, Y7, Y3, Y1
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next
	ERR8(768)
	VCMPPS    $0x11, Y7, Y3, Y1
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next
	// Accept: L = laux, best = cur, scale = this_scale, min = this_min.
	VBLENDVPS Y1, Y3, Y7, Y7
	VMOVUPS   Y7, QBEST(DI)
	VMOVUPS   QSCALE(DI), Y0
	VBLENDVPS Y1, Y5, Y0, Y0
	VMOVUPS   Y0, QSCALE(DI)
	VBLENDVPS Y1, Y4, Y10, Y10
	KEEP8(0)
	KEEP8(256)
	KEEP8(512)
	KEEP8(768)

next:
	INCQ SI
	CMPQ SI, CX
	JLE  step

	// Lanes with max == min: L = 0, scale = 0. Every lane: min = -min_.
	VMOVUPS   QDEAD(DI), Y1
	VMOVUPS   QSCALE(DI), Y0
	VBLENDVPS Y1, Y11, Y0, Y0
	VMOVUPS   Y0, QSCALE(DI)
	VBROADCASTSS qkSign<>(SB), Y0
	VXORPS    Y0, Y10, Y10
	VMOVUPS   Y10, QMIN(DI)
	XORQ      BX, BX

zero:
	VMOVUPS   QL(DI)(BX*1), Y0
	VBLENDVPS Y1, Y11, Y0, Y0
	VMOVUPS   Y0, QL(DI)(BX*1)
	ADDQ      $32, BX
	CMPQ      BX, $1024
	JLT       zero
	VZEROUPPER
	RET

// ERRMAD(o): cur_error += w * |scale*l + min - x| for element o/32 (the
// absolute-error variant; Y5 scale, Y4 min, Y3 cur_error, Y2 abs mask).
#define ERRMAD(o) \
	VCVTDQ2PS QLAUX+o(DI), Y0; \
	VMULPS    Y0, Y5, Y0; \
	VADDPS    Y4, Y0, Y0; \
	VSUBPS    QX+o(DI), Y0, Y0; \
	VANDPS    Y2, Y0, Y0; \
	VMULPS    QW+o(DI), Y0, Y0; \
	VADDPS    Y0, Y3, Y3

#define ERRMAD8(o) \
	ERRMAD(o); ERRMAD(o+32); ERRMAD(o+64); ERRMAD(o+96); \
	ERRMAD(o+128); ERRMAD(o+160); ERRMAD(o+192); ERRMAD(o+224)

// func qkx2Lanes16AVX2(st *qkx2Lanes, nmax int, nstep int, weighted, mad bool)
//
// make_qkx2_quants(16, nmax, x, w, L, Laux, rmin, rdelta, nstep, mad) on 8
// sub-blocks of 16 values (rows 0-15 of st), with st.num as in
// qkx2Lanes32AVX2: Q2_K's search (weights |x|, computed here unless
// weighted; absolute error) and, with weighted and not mad, Q2_K's
// make_qkx3_quants with an importance matrix. The error sums stop early,
// which needs weights >= 0 (or NaN): callers passing their own check that.
TEXT ·qkx2Lanes16AVX2(SB), NOSPLIT, $0-26
	MOVQ st+0(FP), DI
	MOVQ nmax+8(FP), AX
	MOVQ nstep+16(FP), CX
	MOVBLZX weighted+24(FP), R8
	MOVBLZX mad+25(FP), R9

	VBROADCASTSS qkMagic<>(SB), Y14
	VBROADCASTSS qkMant<>(SB), Y13
	VBROADCASTSS qkOff<>(SB), Y12
	VXORPS       Y11, Y11, Y11
	MOVQ         AX, X15
	VPBROADCASTD X15, Y15

	// Weights |x| unless given.
	TESTQ R8, R8
	JNZ   minmax16
	VBROADCASTSS qkAbs<>(SB), Y5
	XORQ  BX, BX

wabs16:
	VMOVUPS QX(DI)(BX*1), Y0
	VANDPS  Y5, Y0, Y0
	VMOVUPS Y0, QW(DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, $512
	JLT     wabs16

minmax16:
	// min, max, sum_w, sum_x.
	VMOVUPS QX(DI), Y10
	VMOVAPS Y10, Y1
	VMOVUPS QW(DI), Y2
	VMULPS  Y10, Y2, Y3
	MOVQ    $32, BX

mm16:
	VMOVUPS QX(DI)(BX*1), Y0
	VMINPS  Y10, Y0, Y10
	VMAXPS  Y1, Y0, Y1
	VMOVUPS QW(DI)(BX*1), Y4
	VADDPS  Y4, Y2, Y2
	VMULPS  Y0, Y4, Y4
	VADDPS  Y4, Y3, Y3
	ADDQ    $32, BX
	CMPQ    BX, $512
	JLT     mm16
	VMINPS  Y10, Y11, Y10        // if min > 0 { min = 0 }
	VMOVUPS Y1, QMAX(DI)
	VMOVUPS Y2, QSUMW(DI)
	VMOVUPS Y3, QSUMX(DI)
	VCMPPS  $0x00, Y10, Y1, Y0   // max == min
	VMOVUPS Y0, QDEAD(DI)

	// Initial levels with iscale = nmax/(max-min), scale = 1/iscale.
	VSUBPS   Y10, Y1, Y1
	VCVTDQ2PS Y15, Y0
	VDIVPS   Y1, Y0, Y9
	VBROADCASTSS qkOne<>(SB), Y0
	VDIVPS   Y9, Y0, Y5
	VMOVUPS  Y5, QSCALE(DI)
	VBROADCASTSS qkAbs<>(SB), Y4
	VXORPS   Y3, Y3, Y3
	XORQ     BX, BX

init16:
	VMOVUPS   QX(DI)(BX*1), Y0
	VSUBPS    Y10, Y0, Y1
	VMULPS    Y1, Y9, Y1
	NEAREST(Y1)
	VMOVDQU   Y1, QL(DI)(BX*1)
	VCVTDQ2PS Y1, Y2
	VMULPS    Y2, Y5, Y2
	VADDPS    Y10, Y2, Y2
	VSUBPS    Y0, Y2, Y2
	TESTQ     R9, R9
	JZ        initsq16
	VANDPS    Y4, Y2, Y2
	JMP       initw16

initsq16:
	VMULPS    Y2, Y2, Y2

initw16:
	VMULPS    QW(DI)(BX*1), Y2, Y2
	VADDPS    Y2, Y3, Y3
	ADDQ      $32, BX
	CMPQ      BX, $512
	JLT       init16
	VMOVUPS   Y3, QBEST(DI)

	XORQ SI, SI

step16:
	VBROADCASTSS QNUM(DI)(SI*4), Y0
	VMOVUPS QMAX(DI), Y1
	VSUBPS  Y10, Y1, Y1
	VDIVPS  Y1, Y0, Y9
	VXORPS  Y8, Y8, Y8
	VXORPS  Y7, Y7, Y7
	VXORPS  Y6, Y6, Y6
	STEPELEM(0); STEPELEM(32); STEPELEM(64); STEPELEM(96)
	STEPELEM(128); STEPELEM(160); STEPELEM(192); STEPELEM(224)
	STEPELEM(256); STEPELEM(288); STEPELEM(320); STEPELEM(352)
	STEPELEM(384); STEPELEM(416); STEPELEM(448); STEPELEM(480)

	VMOVUPS QSUMW(DI), Y0
	VMULPS  Y7, Y0, Y1
	VMULPS  Y8, Y8, Y2
	VSUBPS  Y2, Y1, Y1              // D
	VCMPPS  $0x1E, Y11, Y1, Y2      // D > 0
	VMOVUPS QDEAD(DI), Y3
	VANDNPS Y2, Y3, Y2              // and not dead
	VMOVMSKPS Y2, AX
	TESTL   AX, AX
	JZ      next16
	VMULPS  Y6, Y0, Y3
	VMOVUPS QSUMX(DI), Y4
	VMULPS  Y8, Y4, Y5
	VSUBPS  Y5, Y3, Y3
	VDIVPS  Y1, Y3, Y3
	VMULPS  Y4, Y7, Y4
	VMULPS  Y6, Y8, Y5
	VSUBPS  Y5, Y4, Y4
	VDIVPS  Y1, Y4, Y4
	VCMPPS    $0x1E, Y11, Y4, Y0
	VDIVPS    Y7, Y6, Y5
	VBLENDVPS Y0, Y5, Y3, Y5        // this_scale
	VBLENDVPS Y0, Y11, Y4, Y4       // this_min
	VMOVAPS   Y2, Y8                // live
	VMOVUPS   QBEST(DI), Y7
	VXORPS    Y3, Y3, Y3
	TESTQ     R9, R9
	JZ        errsq16
	VBROADCASTSS qkAbs<>(SB), Y2
	ERRMAD8(0)
	VCMPPS    $0x11, Y7, Y3, Y1
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next16
	ERRMAD8(256)
	JMP       check16

errsq16:
	ERR8(0)
	VCMPPS    $0x11, Y7, Y3, Y1
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next16
	ERR8(256)

check16:
	VCMPPS    $0x11, Y7, Y3, Y1
	VANDPS    Y8, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL     AX, AX
	JZ        next16
	VBLENDVPS Y1, Y3, Y7, Y7
	VMOVUPS   Y7, QBEST(DI)
	VMOVUPS   QSCALE(DI), Y0
	VBLENDVPS Y1, Y5, Y0, Y0
	VMOVUPS   Y0, QSCALE(DI)
	VBLENDVPS Y1, Y4, Y10, Y10
	KEEP8(0)
	KEEP8(256)

next16:
	INCQ SI
	CMPQ SI, CX
	JLE  step16

	VMOVUPS   QDEAD(DI), Y1
	VMOVUPS   QSCALE(DI), Y0
	VBLENDVPS Y1, Y11, Y0, Y0
	VMOVUPS   Y0, QSCALE(DI)
	VBROADCASTSS qkSign<>(SB), Y0
	VXORPS    Y0, Y10, Y10
	VMOVUPS   Y10, QMIN(DI)
	XORQ      BX, BX

zero16:
	VMOVUPS   QL(DI)(BX*1), Y0
	VBLENDVPS Y1, Y11, Y0, Y0
	VMOVUPS   Y0, QL(DI)(BX*1)
	ADDQ      $32, BX
	CMPQ      BX, $512
	JLT       zero16
	VZEROUPPER
	RET
