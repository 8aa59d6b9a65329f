//go:build !purego

#include "textflag.h"

// make_q3_quants (ggml-quants.c) with n = 16, nmax = 4, do_rmse = true, the
// Q3_K search, on the 16 sub-blocks of a super-block at once in the
// qx16Lanes layout (set A: sub-blocks 0-7, set B: 8-15). Every lane
// performs makeQ3Quants' float32 operations for its sub-block in the same
// order, including the element-by-element refinement passes, whose
// acceptance becomes a per-lane blend. A lane whose pass changed nothing
// would change nothing in a further pass (its state is the same), so the
// passes stop when no lane of either set changed, as each lane's loop
// would. Go asm operand order as in qkx2_amd64.s.

// Offsets in qx16Lanes (checked by TestLaneLayouts).
#define XX 0
#define XW 1024
#define XWX 2048
#define XL 3072
#define XSCALE 5120
#define XMAX 5184
#define XDEAD 5312

DATA q3Magic<>+0(SB)/4, $0x4B400000 // 12582912.0f (nearest_int)
GLOBL q3Magic<>(SB), RODATA|NOPTR, $4
DATA q3Mant<>+0(SB)/4, $0x007FFFFF
GLOBL q3Mant<>(SB), RODATA|NOPTR, $4
DATA q3Off<>+0(SB)/4, $0x00400000
GLOBL q3Off<>(SB), RODATA|NOPTR, $4
DATA q3Abs<>+0(SB)/4, $0x7FFFFFFF
GLOBL q3Abs<>(SB), RODATA|NOPTR, $4
DATA q3Hi<>+0(SB)/4, $3
GLOBL q3Hi<>(SB), RODATA|NOPTR, $4
DATA q3Lo<>+0(SB)/4, $-4
GLOBL q3Lo<>(SB), RODATA|NOPTR, $4
DATA q3Four<>+0(SB)/4, $4
GLOBL q3Four<>(SB), RODATA|NOPTR, $4
DATA q3Eps<>+0(SB)/4, $0x26901D7D // 1e-15f (GROUP_MAX_EPS)
GLOBL q3Eps<>(SB), RODATA|NOPTR, $4
DATA q3M4<>+0(SB)/4, $0xC0800000 // -4.0f
GLOBL q3M4<>(SB), RODATA|NOPTR, $4

// Registers: Y15 magic, Y14 mantissa mask, Y13 0x400000, Y12 3, Y11 -4,
// Y7/Y8 sum_lx/sum_l2 of set A, Y9/Y10 of set B, Y6 the lanes changed in
// this pass, Y0-Y5 scratch.

// NEAR3(T): T = max(-4, min(3, nearest_int(T))) in place.
#define NEAR3(T) \
	VADDPS  Y15, T, T; \
	VPAND   Y14, T, T; \
	VPSUBD  Y13, T, T; \
	VPMINSD Y12, T, T; \
	VPMAXSD Y11, T, T

// MAX3(o): amax/max update (first value of largest magnitude wins) for the
// row at byte offset o (Y4 abs mask, Y1 amax, Y2 max).
#define MAX3(o) \
	VMOVUPS   XX+o(DI), Y0; \
	VANDPS    Y4, Y0, Y3; \
	VCMPPS    $0x1E, Y1, Y3, Y5; \
	VBLENDVPS Y5, Y3, Y1, Y1; \
	VBLENDVPS Y5, Y0, Y2, Y2

// INIT3(o, SLX, SL2): w = x*x, wx = w*x, the first level with iscale in Y5,
// sum_lx += wx*l, sum_l2 += (w*l)*l.
#define INIT3(o, SLX, SL2) \
	VMOVUPS   XX+o(DI), Y0; \
	VMULPS    Y0, Y5, Y1; \
	NEAR3(Y1); \
	VMOVDQU   Y1, XL+o(DI); \
	VCVTDQ2PS Y1, Y1; \
	VMULPS    Y0, Y0, Y2; \
	VMOVUPS   Y2, XW+o(DI); \
	VMULPS    Y0, Y2, Y3; \
	VMOVUPS   Y3, XWX+o(DI); \
	VMULPS    Y1, Y3, Y3; \
	VADDPS    Y3, SLX, SLX; \
	VMULPS    Y1, Y2, Y2; \
	VMULPS    Y1, Y2, Y2; \
	VADDPS    Y2, SL2, SL2

#define ROWS16(M, s) \
	M(s); M(s+64); M(s+128); M(s+192); M(s+256); M(s+320); M(s+384); M(s+448); \
	M(s+512); M(s+576); M(s+640); M(s+704); M(s+768); M(s+832); M(s+896); M(s+960)

#define INIT3A(o) INIT3(o, Y7, Y8)
#define INIT3B(o) INIT3(o, Y9, Y10)

// SETUP3(s, INIT): for set s: max, the dead mask (amax < GROUP_MAX_EPS),
// iscale = -4/max and the first levels and sums.
#define SETUP3(s, INIT) \
	VXORPS       Y1, Y1, Y1; \
	VXORPS       Y2, Y2, Y2; \
	VBROADCASTSS q3Abs<>(SB), Y4; \
	ROWS16(MAX3, s); \
	VMOVUPS      Y2, XMAX+s(DI); \
	VBROADCASTSS q3Eps<>(SB), Y3; \
	VCMPPS       $0x11, Y3, Y1, Y3; \
	VMOVUPS      Y3, XDEAD+s(DI); \
	VBROADCASTSS q3M4<>(SB), Y5; \
	VDIVPS       Y2, Y5, Y5; \
	ROWS16(INIT, s)

// Q3E(o, SLX, SL2): one refinement step for the element at byte offset o:
// slx = sum_lx - wx*l, sl2 = sum_l2 - (w*l)*l; where slx > 0, the new
// level nl = clamp(nearest_int(x*sl2/slx)); where it differs, slx += wx*nl,
// sl2 += (w*nl)*nl, and where also sl2 > 0 and slx*slx*sum_l2 >
// sum_lx*sum_lx*sl2, accept: L = nl, sum_lx = slx, sum_l2 = sl2.
#define Q3E(o, SLX, SL2) \
	VCVTDQ2PS XL+o(DI), Y0; \
	VMULPS    XWX+o(DI), Y0, Y1; \
	VSUBPS    Y1, SLX, Y1; \
	VMULPS    XW+o(DI), Y0, Y2; \
	VMULPS    Y0, Y2, Y2; \
	VSUBPS    Y2, SL2, Y2; \
	VMULPS    XX+o(DI), Y2, Y3; \
	VDIVPS    Y1, Y3, Y3; \
	NEAR3(Y3); \
	VCVTDQ2PS Y3, Y4; \
	VMULPS    XWX+o(DI), Y4, Y5; \
	VADDPS    Y5, Y1, Y5; \
	VMULPS    XW+o(DI), Y4, Y0; \
	VMULPS    Y4, Y0, Y0; \
	VADDPS    Y0, Y2, Y0; \
	VMULPS    Y5, Y5, Y2; \
	VMULPS    SL2, Y2, Y2; \
	VMULPS    SLX, SLX, Y4; \
	VMULPS    Y0, Y4, Y4; \
	VCMPPS    $0x1E, Y4, Y2, Y2; \
	VXORPS    Y4, Y4, Y4; \
	VCMPPS    $0x1E, Y4, Y1, Y1; \
	VANDPS    Y1, Y2, Y2; \
	VCMPPS    $0x1E, Y4, Y0, Y1; \
	VANDPS    Y1, Y2, Y2; \
	VPCMPEQD  XL+o(DI), Y3, Y1; \
	VANDNPS   Y2, Y1, Y2; \
	VBLENDVPS Y2, Y5, SLX, SLX; \
	VBLENDVPS Y2, Y0, SL2, SL2; \
	VMOVDQU   XL+o(DI), Y1; \
	VBLENDVPS Y2, Y3, Y1, Y1; \
	VMOVDQU   Y1, XL+o(DI); \
	VORPS     Y2, Y6, Y6

// Q3ROW(o): the step for row o in both sets.
#define Q3ROW(o) Q3E(o, Y7, Y8); Q3E(o+32, Y9, Y10)

// FIN3(o): L = dead ? 0 : L + 4 (Y1 dead, Y0 zero, Y3 4).
#define FIN3(o) \
	VMOVDQU   XL+o(DI), Y2; \
	VPADDD    Y3, Y2, Y2; \
	VBLENDVPS Y1, Y0, Y2, Y2; \
	VMOVDQU   Y2, XL+o(DI)

// FINISH3(s, SLX, SL2): scale = sum_l2 > 0 ? sum_lx/sum_l2 : 0 (0 for
// dead lanes), L + 4.
#define FINISH3(s, SLX, SL2) \
	VMOVUPS      XDEAD+s(DI), Y1; \
	VXORPS       Y0, Y0, Y0; \
	VCMPPS       $0x1E, Y0, SL2, Y2; \
	VDIVPS       SL2, SLX, Y3; \
	VANDPS       Y2, Y3, Y3; \
	VBLENDVPS    Y1, Y0, Y3, Y3; \
	VMOVUPS      Y3, XSCALE+s(DI); \
	VPBROADCASTD q3Four<>(SB), Y3; \
	ROWS16(FIN3, s)

// func q3LanesAVX2(st *qx16Lanes)
//
// Runs make_q3_quants(16, 4, x, L, true) on the 16 sub-blocks in st.x.
// Outputs st.L (levels + 4, in [0, 8)) and st.scale.
TEXT ·q3LanesAVX2(SB), NOSPLIT, $0-8
	MOVQ st+0(FP), DI

	VBROADCASTSS q3Magic<>(SB), Y15
	VBROADCASTSS q3Mant<>(SB), Y14
	VBROADCASTSS q3Off<>(SB), Y13
	VPBROADCASTD q3Hi<>(SB), Y12
	VPBROADCASTD q3Lo<>(SB), Y11

	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	SETUP3(0, INIT3A)
	SETUP3(32, INIT3B)

	MOVQ $5, CX

pass:
	VXORPS Y6, Y6, Y6
	ROWS16(Q3ROW, 0)
	VMOVMSKPS Y6, AX
	TESTL AX, AX
	JZ    finish
	DECQ  CX
	JNZ   pass

finish:
	FINISH3(0, Y7, Y8)
	FINISH3(32, Y9, Y10)
	VZEROUPPER
	RET
