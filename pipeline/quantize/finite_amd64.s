//go:build !purego

#include "textflag.h"

DATA fnExp<>+0(SB)/4, $0x7F800000
GLOBL fnExp<>(SB), RODATA|NOPTR, $4

// func finiteAVX2(x *float32, n int) bool
//
// Reports whether none of the n float32 values at x (n a positive multiple
// of 32) is a NaN or an infinity: a value is not finite exactly when its
// exponent field is all ones, so (bits & 0x7F800000) == 0x7F800000 is
// compared in every lane and the lanes ORed together. Reading and comparing
// only, it has no float arithmetic to keep in order.
TEXT ·finiteAVX2(SB), NOSPLIT, $0-17
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VPBROADCASTD fnExp<>(SB), Y15
	VPXOR        Y8, Y8, Y8
	VPXOR        Y9, Y9, Y9
	XORQ         AX, AX

loop:
	VPAND    (SI)(AX*4), Y15, Y0
	VPAND    32(SI)(AX*4), Y15, Y1
	VPAND    64(SI)(AX*4), Y15, Y2
	VPAND    96(SI)(AX*4), Y15, Y3
	VPCMPEQD Y15, Y0, Y0
	VPCMPEQD Y15, Y1, Y1
	VPCMPEQD Y15, Y2, Y2
	VPCMPEQD Y15, Y3, Y3
	VPOR     Y0, Y8, Y8
	VPOR     Y1, Y9, Y9
	VPOR     Y2, Y8, Y8
	VPOR     Y3, Y9, Y9
	ADDQ     $32, AX
	CMPQ     AX, CX
	JLT      loop
	VPOR     Y9, Y8, Y8
	VPTEST   Y8, Y8
	SETEQ    ret+16(FP)
	VZEROUPPER
	RET
