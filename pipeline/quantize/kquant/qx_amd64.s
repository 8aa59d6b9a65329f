//go:build !purego

#include "textflag.h"

// make_qx_quants (ggml-quants.c) with n = 16 and rmse_type = 1, the Q6_K
// search (nmax 32, weights x*x or an importance matrix) and Q3_K's search
// with an importance matrix (nmax 4), on the 16 sub-blocks of a super-block
// at once: lanes 0-7 of each row hold sub-blocks 0-7 (set A), the next 32
// bytes sub-blocks 8-15 (set B). Every lane performs the float32 operations
// of makeQXQuants for its sub-block in the same order (sums accumulate
// element 0, 1, …, 15; products are rounded before they are added). Go asm
// operand order as in qkx2_amd64.s.

// Offsets in qx16Lanes (checked by TestLaneLayouts).
#define XX 0
#define XW 1024
#define XWX 2048
#define XL 3072
#define XLAUX 4096
#define XSCALE 5120
#define XMAX 5184
#define XBEST 5248
#define XDEAD 5312

DATA qxMagic<>+0(SB)/4, $0x4B400000 // 12582912.0f (nearest_int)
GLOBL qxMagic<>(SB), RODATA|NOPTR, $4
DATA qxMant<>+0(SB)/4, $0x007FFFFF
GLOBL qxMant<>(SB), RODATA|NOPTR, $4
DATA qxOff<>+0(SB)/4, $0x00400000
GLOBL qxOff<>(SB), RODATA|NOPTR, $4
DATA qxAbs<>+0(SB)/4, $0x7FFFFFFF
GLOBL qxAbs<>(SB), RODATA|NOPTR, $4
DATA qxEps<>+0(SB)/4, $0x26901D7D // 1e-15f (GROUP_MAX_EPS)
GLOBL qxEps<>(SB), RODATA|NOPTR, $4

// Registers: Y15 magic, Y14 mantissa mask, Y13 0x400000, Y12 nmax-1,
// Y11 -nmax,
// Y5/Y6 iscale (A/B), Y7/Y8 sum_lx/sum_l2 (A), Y9/Y10 (B), Y0-Y4 scratch.

// NEARQ(T): T = max(-nmax, min(nmax-1, nearest_int(T))) in place.
#define NEARQ(T) \
	VADDPS  Y15, T, T; \
	VPAND   Y14, T, T; \
	VPSUBD  Y13, T, T; \
	VPMINSD Y12, T, T; \
	VPMAXSD Y11, T, T

// QXE(o): the levels of row o/64 for both sets, stored in laux, and the
// sums sum_lx += (w*x)*l, sum_l2 += (w*l)*l.
#define QXE(o) \
	VMULPS    XX+o(DI), Y5, Y0; \
	NEARQ(Y0); \
	VMOVDQU   Y0, XLAUX+o(DI); \
	VCVTDQ2PS Y0, Y1; \
	VMULPS    XWX+o(DI), Y1, Y2; \
	VADDPS    Y2, Y7, Y7; \
	VMULPS    XW+o(DI), Y1, Y2; \
	VMULPS    Y1, Y2, Y2; \
	VADDPS    Y2, Y8, Y8; \
	VMULPS    XX+32+o(DI), Y6, Y3; \
	NEARQ(Y3); \
	VMOVDQU   Y3, XLAUX+32+o(DI); \
	VCVTDQ2PS Y3, Y4; \
	VMULPS    XWX+32+o(DI), Y4, Y2; \
	VADDPS    Y2, Y9, Y9; \
	VMULPS    XW+32+o(DI), Y4, Y2; \
	VMULPS    Y4, Y2, Y2; \
	VADDPS    Y2, Y10, Y10

// KEEPQ(o): L = accepted ? laux : L at byte offset o (mask in Y3).
#define KEEPQ(o) \
	VMOVUPS   XL+o(DI), Y0; \
	VBLENDVPS Y3, XLAUX+o(DI), Y0, Y0; \
	VMOVUPS   Y0, XL+o(DI)

#define KEEPQ16(s) ROWS16(KEEPQ, s)

// ACCEPT(s, SLX, SL2, lbl): for set s (byte offset 0 or 32), accept the
// trial (or jump to lbl when no lane does) in the lanes where sum_l2 > 0 && sum_lx*sum_lx > best*sum_l2:
// scale = sum_lx/sum_l2, best = scale*sum_lx, L = laux.
#define ACCEPT(s, SLX, SL2, lbl) \
	VXORPS    Y0, Y0, Y0; \
	VCMPPS    $0x1E, Y0, SL2, Y3; \
	VMULPS    SLX, SLX, Y1; \
	VMOVUPS   XBEST+s(DI), Y4; \
	VMULPS    SL2, Y4, Y2; \
	VCMPPS    $0x1E, Y2, Y1, Y1; \
	VANDPS    Y1, Y3, Y3; \
	VMOVMSKPS Y3, AX; \
	TESTL     AX, AX; \
	JZ        lbl; \
	VDIVPS    SL2, SLX, Y1; \
	VMOVUPS   XSCALE+s(DI), Y2; \
	VBLENDVPS Y3, Y1, Y2, Y2; \
	VMOVUPS   Y2, XSCALE+s(DI); \
	VMULPS    SLX, Y1, Y1; \
	VBLENDVPS Y3, Y1, Y4, Y4; \
	VMOVUPS   Y4, XBEST+s(DI); \
	KEEPQ16(s)

// MAXE(o): amax/max update for the row at byte offset o: the value of
// largest magnitude, the first one wins (Y4 abs mask, Y1 amax, Y2 max).
#define MAXE(o) \
	VMOVUPS   XX+o(DI), Y0; \
	VANDPS    Y4, Y0, Y3; \
	VCMPPS    $0x1E, Y1, Y3, Y5; \
	VBLENDVPS Y5, Y3, Y1, Y1; \
	VBLENDVPS Y5, Y0, Y2, Y2

// INITE(o): w = x*x, wx = w*x, the initial level (iscale in Y5) and sums
// (Y7, Y8) for the row at byte offset o.
#define INITE(o) \
	VMOVUPS   XX+o(DI), Y0; \
	VMULPS    Y0, Y5, Y1; \
	NEARQ(Y1); \
	VMOVDQU   Y1, XL+o(DI); \
	VCVTDQ2PS Y1, Y1; \
	VMULPS    Y0, Y0, Y2; \
	VMOVUPS   Y2, XW+o(DI); \
	VMULPS    Y0, Y2, Y3; \
	VMOVUPS   Y3, XWX+o(DI); \
	VMULPS    Y1, Y3, Y3; \
	VADDPS    Y3, Y7, Y7; \
	VMULPS    Y1, Y2, Y2; \
	VMULPS    Y1, Y2, Y2; \
	VADDPS    Y2, Y8, Y8

// INITEW(o): INITE with the weights w given in st.w (the imatrix path).
#define INITEW(o) \
	VMOVUPS   XX+o(DI), Y0; \
	VMULPS    Y0, Y5, Y1; \
	NEARQ(Y1); \
	VMOVDQU   Y1, XL+o(DI); \
	VCVTDQ2PS Y1, Y1; \
	VMOVUPS   XW+o(DI), Y2; \
	VMULPS    Y0, Y2, Y3; \
	VMOVUPS   Y3, XWX+o(DI); \
	VMULPS    Y1, Y3, Y3; \
	VADDPS    Y3, Y7, Y7; \
	VMULPS    Y1, Y2, Y2; \
	VMULPS    Y1, Y2, Y2; \
	VADDPS    Y2, Y8, Y8

#define ROWS16(M, s) \
	M(s); M(s+64); M(s+128); M(s+192); M(s+256); M(s+320); M(s+384); M(s+448); \
	M(s+512); M(s+576); M(s+640); M(s+704); M(s+768); M(s+832); M(s+896); M(s+960)

// SETUP(s): for set s: max (the value of largest magnitude, first one
// wins), the dead mask (amax < GROUP_MAX_EPS), w, wx, the initial levels
// and sums with iscale = -nmax/max, scale (0 unless sum_l2 != 0) and best.
#define SETUP(s, INIT) \
	VXORPS       Y1, Y1, Y1; \
	VXORPS       Y2, Y2, Y2; \
	VBROADCASTSS qxAbs<>(SB), Y4; \
	ROWS16(MAXE, s); \
	VMOVUPS      Y2, XMAX+s(DI); \
	VBROADCASTSS qxEps<>(SB), Y3; \
	VCMPPS       $0x11, Y3, Y1, Y3; \
	VMOVUPS      Y3, XDEAD+s(DI); \
	VCVTDQ2PS    Y11, Y5; \
	VDIVPS       Y2, Y5, Y5; \
	VXORPS       Y7, Y7, Y7; \
	VXORPS       Y8, Y8, Y8; \
	ROWS16(INIT, s); \
	VXORPS       Y0, Y0, Y0; \
	VCMPPS       $0x04, Y0, Y8, Y1; \
	VDIVPS       Y8, Y7, Y2; \
	VANDPS       Y1, Y2, Y2; \
	VMOVUPS      Y2, XSCALE+s(DI); \
	VMULPS       Y7, Y2, Y2; \
	VMOVUPS      Y2, XBEST+s(DI)

// FINE(o): L = dead ? 0 : L + nmax for the row at byte offset o (Y1 dead,
// Y0 zero, Y3 nmax).
#define FINE(o) \
	VMOVDQU   XL+o(DI), Y2; \
	VPADDD    Y3, Y2, Y2; \
	VBLENDVPS Y1, Y0, Y2, Y2; \
	VMOVDQU   Y2, XL+o(DI)

// FINISH(s): dead lanes of set s get scale 0 and L 0, the others
// L = level + nmax.
#define FINISH(s) \
	VMOVUPS   XDEAD+s(DI), Y1; \
	VXORPS    Y0, Y0, Y0; \
	VMOVUPS   XSCALE+s(DI), Y2; \
	VBLENDVPS Y1, Y0, Y2, Y2; \
	VMOVUPS   Y2, XSCALE+s(DI); \
	VPSUBD    Y11, Y0, Y3; \
	ROWS16(FINE, s)

// func qx16LanesAVX2(st *qx16Lanes, num *[18]float32, weighted bool, nmax int)
//
// Runs make_qx_quants(16, nmax, x, L, 1, qw) on the 16 sub-blocks in st.x,
// with qw NULL (weights x*x) or, if weighted, the weights in st.w; num
// holds -(nmax + 0.1*is) for is = -9..-1, 1..9 as the C code computes it.
// Outputs st.L (levels + nmax, in [0, 2*nmax)) and st.scale.
TEXT ·qx16LanesAVX2(SB), NOSPLIT, $0-32
	MOVQ st+0(FP), DI
	MOVQ num+8(FP), SI

	VBROADCASTSS qxMagic<>(SB), Y15
	VBROADCASTSS qxMant<>(SB), Y14
	VBROADCASTSS qxOff<>(SB), Y13
	MOVQ         nmax+24(FP), AX
	DECQ         AX
	MOVQ         AX, X12
	VPBROADCASTD X12, Y12
	INCQ         AX
	NEGQ         AX
	MOVQ         AX, X11
	VPBROADCASTD X11, Y11

	MOVBLZX weighted+16(FP), AX
	TESTQ   AX, AX
	JNZ     setupw
	SETUP(0, INITE)
	SETUP(32, INITE)
	JMP     trials

setupw:
	SETUP(0, INITEW)
	SETUP(32, INITEW)

trials:
	XORQ CX, CX

trial:
	VBROADCASTSS (SI)(CX*4), Y0
	VDIVPS  XMAX(DI), Y0, Y5
	VDIVPS  XMAX+32(DI), Y0, Y6
	VXORPS  Y7, Y7, Y7
	VXORPS  Y8, Y8, Y8
	VXORPS  Y9, Y9, Y9
	VXORPS  Y10, Y10, Y10
	QXE(0); QXE(64); QXE(128); QXE(192)
	QXE(256); QXE(320); QXE(384); QXE(448)
	QXE(512); QXE(576); QXE(640); QXE(704)
	QXE(768); QXE(832); QXE(896); QXE(960)
	ACCEPT(0, Y7, Y8, acceptB)

acceptB:
	ACCEPT(32, Y9, Y10, nexttrial)

nexttrial:
	INCQ CX
	CMPQ CX, $18
	JLT  trial

	FINISH(0)
	FINISH(32)
	VZEROUPPER
	RET
