//go:build !purego

#include "textflag.h"

// Transposes of a super-block into the lane layouts (lanes.go), checking on
// the way that every value is finite.

DATA trExp<>+0(SB)/4, $0x7F800000
DATA trExp<>+4(SB)/4, $0x7F800000
DATA trExp<>+8(SB)/4, $0x7F800000
DATA trExp<>+12(SB)/4, $0x7F800000
DATA trExp<>+16(SB)/4, $0x7F800000
DATA trExp<>+20(SB)/4, $0x7F800000
DATA trExp<>+24(SB)/4, $0x7F800000
DATA trExp<>+28(SB)/4, $0x7F800000
GLOBL trExp<>(SB), RODATA|NOPTR, $32

// CHECK(R): OR into Y9 the lanes of R whose exponent field is all ones
// (NaN or Inf).
#define CHECK(R) \
	VPAND    trExp<>(SB), R, Y8; \
	VPCMPEQD trExp<>(SB), Y8, Y8; \
	VPOR     Y8, Y9, Y9

// TILE(lb, ls, sb, ss): loads 8 rows of 8 floats from lb+k*ls(SI), jumps
// to bad if one holds a NaN or Inf, transposes them and stores column k at
// sb+k*ss(DI).
#define TILE(lb, ls, sb, ss) \
	VMOVUPS lb(SI), Y0; \
	VMOVUPS lb+ls(SI), Y1; \
	VMOVUPS lb+2*ls(SI), Y2; \
	VMOVUPS lb+3*ls(SI), Y3; \
	VMOVUPS lb+4*ls(SI), Y4; \
	VMOVUPS lb+5*ls(SI), Y5; \
	VMOVUPS lb+6*ls(SI), Y6; \
	VMOVUPS lb+7*ls(SI), Y7; \
	VPXOR   Y9, Y9, Y9; \
	CHECK(Y0); CHECK(Y1); CHECK(Y2); CHECK(Y3); \
	CHECK(Y4); CHECK(Y5); CHECK(Y6); CHECK(Y7); \
	VPTEST  Y9, Y9; \
	JNZ     bad; \
	VUNPCKLPS Y1, Y0, Y8; \
	VUNPCKHPS Y1, Y0, Y9; \
	VUNPCKLPS Y3, Y2, Y10; \
	VUNPCKHPS Y3, Y2, Y11; \
	VUNPCKLPS Y5, Y4, Y12; \
	VUNPCKHPS Y5, Y4, Y13; \
	VUNPCKLPS Y7, Y6, Y14; \
	VUNPCKHPS Y7, Y6, Y15; \
	VSHUFPS $0x44, Y10, Y8, Y0; \
	VSHUFPS $0xEE, Y10, Y8, Y1; \
	VSHUFPS $0x44, Y11, Y9, Y2; \
	VSHUFPS $0xEE, Y11, Y9, Y3; \
	VSHUFPS $0x44, Y14, Y12, Y4; \
	VSHUFPS $0xEE, Y14, Y12, Y5; \
	VSHUFPS $0x44, Y15, Y13, Y6; \
	VSHUFPS $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VPERM2F128 $0x20, Y5, Y1, Y9; \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15; \
	VMOVUPS Y8, sb(DI); \
	VMOVUPS Y9, sb+ss(DI); \
	VMOVUPS Y10, sb+2*ss(DI); \
	VMOVUPS Y11, sb+3*ss(DI); \
	VMOVUPS Y12, sb+4*ss(DI); \
	VMOVUPS Y13, sb+5*ss(DI); \
	VMOVUPS Y14, sb+6*ss(DI); \
	VMOVUPS Y15, sb+7*ss(DI)

// func transpose32AVX2(dst *[32][8]float32, x *[256]float32) bool
//
// dst[i][j] = x[32*j+i]; false (dst partly written) if a value is NaN or
// Inf.
TEXT ·transpose32AVX2(SB), NOSPLIT, $0-17
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	TILE(0, 128, 0, 32)
	TILE(32, 128, 256, 32)
	TILE(64, 128, 512, 32)
	TILE(96, 128, 768, 32)
	VZEROUPPER
	MOVB $1, ret+16(FP)
	RET

bad:
	VZEROUPPER
	MOVB $0, ret+16(FP)
	RET

// func transpose16AVX2(dst *[16][16]float32, x *[256]float32) bool
//
// dst[i][j] = x[16*j+i]; false (dst partly written) if a value is NaN or
// Inf.
TEXT ·transpose16AVX2(SB), NOSPLIT, $0-17
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	TILE(0, 64, 0, 64)
	TILE(32, 64, 512, 64)
	TILE(512, 64, 32, 64)
	TILE(544, 64, 544, 64)
	VZEROUPPER
	MOVB $1, ret+16(FP)
	RET

bad:
	VZEROUPPER
	MOVB $0, ret+16(FP)
	RET

// func transpose16x8AVX2(dst *[32][8]float32, x *[128]float32) bool
//
// dst[i][j] = x[16*j+i] for i < 16 (8 sub-blocks of 16 values); false (dst
// partly written) if a value is NaN or Inf.
TEXT ·transpose16x8AVX2(SB), NOSPLIT, $0-17
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	TILE(0, 64, 0, 32)
	TILE(32, 64, 256, 32)
	VZEROUPPER
	MOVB $1, ret+16(FP)
	RET

bad:
	VZEROUPPER
	MOVB $0, ret+16(FP)
	RET
