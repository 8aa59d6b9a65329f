#include "textflag.h"

// func encodeBF16AVX2(dst *byte, src *float64, n int) int
//
// Rounds src to bfloat16 eight values at a time, as bf16() does: VCVTPD2PS rounds to float32 (nearest even,
// Go's MXCSR), then the float32 is rounded to nearest even on its low 16 bits. It stops before the first
// group of eight that needs the scalar path (a float32 sitting exactly on a bf16 midpoint, whose exactness
// decides the direction, or a value that is or becomes NaN/Inf) and returns how many values it encoded.
TEXT ·encodeBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	MOVL $0xFFFF, R8
	VMOVD R8, X10
	VPBROADCASTD X10, Y10
	MOVL $0x8000, R8
	VMOVD R8, X11
	VPBROADCASTD X11, Y11
	MOVL $0x7F800000, R8
	VMOVD R8, X12
	VPBROADCASTD X12, Y12
	MOVL $0x7FFF, R8
	VMOVD R8, X13
	VPBROADCASTD X13, Y13
	MOVL $1, R8
	VMOVD R8, X14
	VPBROADCASTD X14, Y14
	MOVL $0x7F80, R8
	VMOVD R8, X15
	VPBROADCASTD X15, Y15

loop:
	LEAQ 8(AX), R9
	CMPQ R9, CX
	JGT done
	VCVTPD2PSY (SI)(AX*8), X0
	VCVTPD2PSY 32(SI)(AX*8), X1
	VINSERTF128 $1, X1, Y0, Y0
	VPAND Y10, Y0, Y2
	VPCMPEQD Y11, Y2, Y2
	VPAND Y12, Y0, Y3
	VPCMPEQD Y12, Y3, Y3
	VPOR Y3, Y2, Y2
	VPSRLD $16, Y0, Y4
	VPAND Y14, Y4, Y4
	VPADDD Y13, Y0, Y5
	VPADDD Y4, Y5, Y5
	VPSRLD $16, Y5, Y5
	VPAND Y15, Y5, Y6
	VPCMPEQD Y15, Y6, Y6
	VPOR Y6, Y2, Y2
	VPTEST Y2, Y2
	JNZ done
	VEXTRACTI128 $1, Y5, X7
	VPACKUSDW X7, X5, X5
	VMOVDQU X5, (DI)(AX*2)
	MOVQ R9, AX
	JMP loop

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// func decodeBF16AVX2(dst *float64, src *byte, n int)
//
// Widens n bfloat16 values (n a multiple of 8, > 0) to float64: bits << 16 is the float32, VCVTPS2PD is
// exact (as Go's float64(float32)).
TEXT ·decodeBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

dloop:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y3
	VMOVUPD Y1, (DI)
	VMOVUPD Y3, 32(DI)
	ADDQ $16, SI
	ADDQ $64, DI
	SUBQ $8, CX
	JNZ dloop
	VZEROUPPER
	RET
