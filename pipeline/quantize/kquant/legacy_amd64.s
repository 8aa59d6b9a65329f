//go:build !purego

#include "textflag.h"

// quantize_row_q8_0_ref and quantize_row_q4_0_ref (ggml-quants.c) with AVX2
// and F16C, one 32-value block per iteration. Both stop before the first
// block that holds a NaN or Inf and return how many blocks they encoded;
// the caller runs the scalar kernel on that block (its NaN rules are the
// scalar code's) and continues. On finite values every operation below is
// the scalar code's float32 operation, and the reductions only pick a
// maximum, which does not depend on order.

DATA lgAbs<>+0(SB)/4, $0x7FFFFFFF
GLOBL lgAbs<>(SB), RODATA|NOPTR, $4
DATA lgExp<>+0(SB)/4, $0x7F800000
GLOBL lgExp<>(SB), RODATA|NOPTR, $4
DATA lgSign<>+0(SB)/4, $0x80000000
GLOBL lgSign<>(SB), RODATA|NOPTR, $4
DATA lgHalf<>+0(SB)/4, $0x3F000000 // 0.5f
GLOBL lgHalf<>(SB), RODATA|NOPTR, $4
DATA lgOne<>+0(SB)/4, $0x3F800000 // 1.0f
GLOBL lgOne<>(SB), RODATA|NOPTR, $4
DATA lg127<>+0(SB)/4, $0x42FE0000 // 127.0f
GLOBL lg127<>(SB), RODATA|NOPTR, $4
DATA lgM8<>+0(SB)/4, $0xC1000000 // -8.0f
GLOBL lgM8<>(SB), RODATA|NOPTR, $4
DATA lg8h<>+0(SB)/4, $0x41080000 // 8.5f
GLOBL lg8h<>(SB), RODATA|NOPTR, $4
DATA lgFF<>+0(SB)/4, $0xFF
GLOBL lgFF<>(SB), RODATA|NOPTR, $4
DATA lg15<>+0(SB)/4, $15
GLOBL lg15<>(SB), RODATA|NOPTR, $4
// VPERMD order that undoes the in-lane interleave of VPACKUSDW/VPACKUSWB.
DATA lgPerm<>+0(SB)/4, $0
DATA lgPerm<>+4(SB)/4, $4
DATA lgPerm<>+8(SB)/4, $1
DATA lgPerm<>+12(SB)/4, $5
DATA lgPerm<>+16(SB)/4, $2
DATA lgPerm<>+20(SB)/4, $6
DATA lgPerm<>+24(SB)/4, $3
DATA lgPerm<>+28(SB)/4, $7
GLOBL lgPerm<>(SB), RODATA|NOPTR, $32

// LOAD4: Y0-Y3 = the block's 32 values; jumps to done if one is NaN or
// Inf (exponent field all ones; Y15 holds the exponent mask).
#define LOAD4 \
	VMOVUPS  (SI), Y0; \
	VMOVUPS  32(SI), Y1; \
	VMOVUPS  64(SI), Y2; \
	VMOVUPS  96(SI), Y3; \
	VPAND    Y15, Y0, Y4; \
	VPCMPEQD Y15, Y4, Y4; \
	VPAND    Y15, Y1, Y5; \
	VPCMPEQD Y15, Y5, Y5; \
	VPOR     Y5, Y4, Y4; \
	VPAND    Y15, Y2, Y5; \
	VPCMPEQD Y15, Y5, Y5; \
	VPOR     Y5, Y4, Y4; \
	VPAND    Y15, Y3, Y5; \
	VPCMPEQD Y15, Y5, Y5; \
	VPOR     Y5, Y4, Y4; \
	VPTEST   Y4, Y4; \
	JNZ      done

// AMAX: Y4-Y7 = |Y0-Y3| (Y14 abs mask), X8 = max of them in every lane.
#define AMAX \
	VANDPS       Y14, Y0, Y4; \
	VANDPS       Y14, Y1, Y5; \
	VANDPS       Y14, Y2, Y6; \
	VANDPS       Y14, Y3, Y7; \
	VMAXPS       Y5, Y4, Y8; \
	VMAXPS       Y7, Y6, Y9; \
	VMAXPS       Y9, Y8, Y8; \
	VEXTRACTF128 $1, Y8, X9; \
	VMAXPS       X9, X8, X8; \
	VPERMILPS    $0x4E, X8, X9; \
	VMAXPS       X9, X8, X8; \
	VPERMILPS    $0xB1, X8, X9; \
	VMAXPS       X9, X8, X8

// ROUNDAWAY(R): R = roundf(R) (half away from zero): the integer part of
// |R| plus one where the fraction (exact) is at least one half, with R's
// sign. NaN and Inf stay NaN and Inf.
#define ROUNDAWAY(R) \
	VANDPS    Y14, R, Y9; \
	VROUNDPS  $3, Y9, Y10; \
	VSUBPS    Y10, Y9, Y9; \
	VCMPPS    $0x1D, Y12, Y9, Y9; \
	VANDPS    Y11, Y9, Y9; \
	VADDPS    Y9, Y10, Y10; \
	VANDNPS   R, Y14, R; \
	VORPS     Y10, R, R

// func q8_0AVX2(dst *byte, src *float32, nb int) int
//
// Q8_0: amax = max |x|, d = amax/127, id = d != 0 ? 1/d : 0, the f16 of d,
// then q = (int8)roundf(x*id) (through C's float to int conversion).
TEXT ·q8_0AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	XORQ AX, AX
	VBROADCASTSS lgExp<>(SB), Y15
	VBROADCASTSS lgAbs<>(SB), Y14
	VBROADCASTSS lgHalf<>(SB), Y12
	VBROADCASTSS lgOne<>(SB), Y11
	VPBROADCASTD lgFF<>(SB), Y13
	CMPQ AX, CX
	JGE  done

q8loop:
	LOAD4
	AMAX
	VDIVSS   lg127<>(SB), X8, X8       // d = amax/127
	VCVTPS2PH $0, X8, X9
	VPEXTRW  $0, X9, BX
	MOVW     BX, (DI)
	VXORPS   X9, X9, X9
	VCMPSS   $0x04, X9, X8, X10        // d != 0
	VMOVSS   lgOne<>(SB), X9
	VDIVSS   X8, X9, X9                // 1/d
	VANDPS   X10, X9, X9               // id
	VBROADCASTSS X9, Y9
	VMULPS   Y9, Y0, Y0
	VMULPS   Y9, Y1, Y1
	VMULPS   Y9, Y2, Y2
	VMULPS   Y9, Y3, Y3
	VMOVDQU  lgPerm<>(SB), Y8          // (ROUNDAWAY uses Y9, Y10)
	ROUNDAWAY(Y0)
	ROUNDAWAY(Y1)
	ROUNDAWAY(Y2)
	ROUNDAWAY(Y3)
	VCVTTPS2DQ Y0, Y0
	VCVTTPS2DQ Y1, Y1
	VCVTTPS2DQ Y2, Y2
	VCVTTPS2DQ Y3, Y3
	VPAND      Y13, Y0, Y0
	VPAND      Y13, Y1, Y1
	VPAND      Y13, Y2, Y2
	VPAND      Y13, Y3, Y3
	VPACKUSDW  Y1, Y0, Y0
	VPACKUSDW  Y3, Y2, Y2
	VPACKUSWB  Y2, Y0, Y0
	VPERMD     Y0, Y8, Y0
	VMOVDQU    Y0, 2(DI)
	ADDQ $128, SI
	ADDQ $34, DI
	INCQ AX
	CMPQ AX, CX
	JLT  q8loop

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// func q4_0AVX2(dst *byte, src *float32, nb int) int
//
// Q4_0: max = the value of largest magnitude (the first one; +0 when all
// are zero), d = max/-8, id = d != 0 ? 1/d : 0, the f16 of d, then
// q = MIN(15, (int8)(x*id + 8.5)) with y[j] = q[j] | q[j+16]<<4.
TEXT ·q4_0AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	XORQ AX, AX
	VBROADCASTSS lgExp<>(SB), Y15
	VBROADCASTSS lgAbs<>(SB), Y14
	VPBROADCASTD lgFF<>(SB), Y13
	VPBROADCASTD lg15<>(SB), Y12
	VBROADCASTSS lg8h<>(SB), Y11
	CMPQ AX, CX
	JGE  done

q4loop:
	LOAD4
	AMAX
	// The first index whose |x| equals amax.
	VBROADCASTSS X8, Y8
	VCMPPS    $0x00, Y8, Y4, Y4
	VCMPPS    $0x00, Y8, Y5, Y5
	VCMPPS    $0x00, Y8, Y6, Y6
	VCMPPS    $0x00, Y8, Y7, Y7
	VMOVMSKPS Y4, BX
	VMOVMSKPS Y5, DX
	SHLL      $8, DX
	ORL       DX, BX
	VMOVMSKPS Y6, DX
	SHLL      $16, DX
	ORL       DX, BX
	VMOVMSKPS Y7, DX
	SHLL      $24, DX
	ORL       DX, BX
	BSFL      BX, BX
	VMOVSS    (SI)(BX*4), X9           // max
	VXORPS    X10, X10, X10
	VCMPSS    $0x04, X10, X8, X10      // amax != 0
	VANDPS    X10, X9, X9              // else max = +0
	VDIVSS    lgM8<>(SB), X9, X9       // d = max/-8
	VCVTPS2PH $0, X9, X10
	VPEXTRW   $0, X10, BX
	MOVW      BX, (DI)
	VXORPS    X10, X10, X10
	VCMPSS    $0x04, X10, X9, X10      // d != 0
	VMOVSS    lgOne<>(SB), X8
	VDIVSS    X9, X8, X8               // 1/d
	VANDPS    X10, X8, X8              // id
	VBROADCASTSS X8, Y8
	VMULPS    Y8, Y0, Y0
	VMULPS    Y8, Y1, Y1
	VMULPS    Y8, Y2, Y2
	VMULPS    Y8, Y3, Y3
	VADDPS    Y11, Y0, Y0
	VADDPS    Y11, Y1, Y1
	VADDPS    Y11, Y2, Y2
	VADDPS    Y11, Y3, Y3
	VCVTTPS2DQ Y0, Y0
	VCVTTPS2DQ Y1, Y1
	VCVTTPS2DQ Y2, Y2
	VCVTTPS2DQ Y3, Y3
	// (int8) then MIN(15, ·).
	VPSLLD  $24, Y0, Y0
	VPSRAD  $24, Y0, Y0
	VPSLLD  $24, Y1, Y1
	VPSRAD  $24, Y1, Y1
	VPSLLD  $24, Y2, Y2
	VPSRAD  $24, Y2, Y2
	VPSLLD  $24, Y3, Y3
	VPSRAD  $24, Y3, Y3
	VPMINSD Y12, Y0, Y0
	VPMINSD Y12, Y1, Y1
	VPMINSD Y12, Y2, Y2
	VPMINSD Y12, Y3, Y3
	// y[j] = (uint8)(q[j] | q[j+16]<<4)
	VPSLLD  $4, Y2, Y2
	VPSLLD  $4, Y3, Y3
	VPOR    Y2, Y0, Y0
	VPOR    Y3, Y1, Y1
	VPAND   Y13, Y0, Y0
	VPAND   Y13, Y1, Y1
	VPACKUSDW Y1, Y0, Y0
	VPERMQ  $0xD8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VMOVDQU X0, 2(DI)
	ADDQ $128, SI
	ADDQ $18, DI
	INCQ AX
	CMPQ AX, CX
	JLT  q4loop

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

DATA rqMagic<>+0(SB)/4, $0x4B400000 // 12582912.0f (nearest_int)
GLOBL rqMagic<>(SB), RODATA|NOPTR, $4
DATA rqMant<>+0(SB)/4, $0x007FFFFF
GLOBL rqMant<>(SB), RODATA|NOPTR, $4
DATA rqOff<>+0(SB)/4, $0x00400000
GLOBL rqOff<>(SB), RODATA|NOPTR, $4

// func requantAVX2(dst *byte, x *float32, n int, d, dm float32, lo, hi, off int)
//
// The final pass of the K-quants: dst[i] = MAX(lo, MIN(hi,
// nearest_int((x[i] + dm) / d))) + off for n values (a positive multiple
// of 8). Callers whose C code computes x/d pass dm = +0: x + 0 is x for
// every x but -0, which becomes +0, and nearest_int gives 0 for both.
TEXT ·requantAVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS d+24(FP), Y15
	VBROADCASTSS dm+28(FP), Y14
	MOVQ lo+32(FP), AX
	MOVQ AX, X13
	VPBROADCASTD X13, Y13
	MOVQ hi+40(FP), AX
	MOVQ AX, X12
	VPBROADCASTD X12, Y12
	MOVQ off+48(FP), AX
	MOVQ AX, X11
	VPBROADCASTD X11, Y11
	VBROADCASTSS rqMagic<>(SB), Y10
	VBROADCASTSS rqMant<>(SB), Y9
	VBROADCASTSS rqOff<>(SB), Y8

rqloop:
	VMOVUPS      (SI), Y0
	VADDPS       Y14, Y0, Y0
	VDIVPS       Y15, Y0, Y0
	VADDPS       Y10, Y0, Y0
	VPAND        Y9, Y0, Y0
	VPSUBD       Y8, Y0, Y0
	VPMINSD      Y12, Y0, Y0
	VPMAXSD      Y13, Y0, Y0
	VPADDD       Y11, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSDW    X1, X0, X0
	VPACKUSWB    X0, X0, X0
	MOVQ         X0, (DI)
	ADDQ         $32, SI
	ADDQ         $8, DI
	SUBQ         $8, CX
	JNZ          rqloop
	VZEROUPPER
	RET
