#include "textflag.h"

// func lowRankAVX2(x *float64, n int, u *float64, r int, v *float64, ld int)
//
// For each block of 16 columns j: acc = x[j:j+16]; for k in 0..r-1: acc = u[k]*v[k*ld+j : +16] + acc (one
// rounding per VFMADD231PD, as math.FMA); x[j:j+16] = acc. Requires AVX2 and FMA; n is a multiple of 16 and
// r >= 1.
TEXT ·lowRankAVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ u+16(FP), SI
	MOVQ r+24(FP), R8
	MOVQ v+32(FP), DX
	MOVQ ld+40(FP), BX
	SHLQ $3, BX          // row stride in bytes
	SHLQ $3, CX          // n in bytes
	XORQ R9, R9          // column offset in bytes

block:
	VMOVUPD 0(DI)(R9*1), Y0
	VMOVUPD 32(DI)(R9*1), Y1
	VMOVUPD 64(DI)(R9*1), Y2
	VMOVUPD 96(DI)(R9*1), Y3
	MOVQ SI, R10
	LEAQ (DX)(R9*1), R11
	MOVQ R8, R12

rank:
	VBROADCASTSD (R10), Y4
	VFMADD231PD 0(R11), Y4, Y0
	VFMADD231PD 32(R11), Y4, Y1
	VFMADD231PD 64(R11), Y4, Y2
	VFMADD231PD 96(R11), Y4, Y3
	ADDQ $8, R10
	ADDQ BX, R11
	DECQ R12
	JNZ rank

	VMOVUPD Y0, 0(DI)(R9*1)
	VMOVUPD Y1, 32(DI)(R9*1)
	VMOVUPD Y2, 64(DI)(R9*1)
	VMOVUPD Y3, 96(DI)(R9*1)
	ADDQ $128, R9
	CMPQ R9, CX
	JLT block
	VZEROUPPER
	RET

// func lowRank4AVX2(x *float64, ldx int, n int, ug *float64, r int, v *float64, ldv int)
//
// Four rows at once: rows x, x+ldx, x+2·ldx, x+3·ldx; ug holds u of the four rows interleaved, ug[k*4+i].
// For each block of 8 columns j and each row i: acc = x_i[j:j+8]; for k in 0..r-1:
// acc = ug[k*4+i]*v[k*ldv+j : +8] + acc. Each v vector is loaded once for the four rows. n is a multiple of 8,
// r >= 1.
TEXT ·lowRank4AVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), DI
	MOVQ ldx+8(FP), AX
	SHLQ $3, AX
	LEAQ (DI)(AX*1), R13
	LEAQ (DI)(AX*2), R14
	LEAQ (R13)(AX*2), AX
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	MOVQ ug+24(FP), SI
	MOVQ r+32(FP), BX
	MOVQ v+40(FP), DX
	MOVQ ldv+48(FP), R8
	SHLQ $3, R8
	XORQ R9, R9

block4:
	VMOVUPD 0(DI)(R9*1), Y0
	VMOVUPD 32(DI)(R9*1), Y1
	VMOVUPD 0(R13)(R9*1), Y2
	VMOVUPD 32(R13)(R9*1), Y3
	VMOVUPD 0(R14)(R9*1), Y4
	VMOVUPD 32(R14)(R9*1), Y5
	VMOVUPD 0(AX)(R9*1), Y6
	VMOVUPD 32(AX)(R9*1), Y7
	MOVQ SI, R10
	LEAQ (DX)(R9*1), R12
	MOVQ BX, R15

rank4:
	VMOVUPD 0(R12), Y8
	VMOVUPD 32(R12), Y9
	VBROADCASTSD 0(R10), Y10
	VFMADD231PD Y8, Y10, Y0
	VFMADD231PD Y9, Y10, Y1
	VBROADCASTSD 8(R10), Y11
	VFMADD231PD Y8, Y11, Y2
	VFMADD231PD Y9, Y11, Y3
	VBROADCASTSD 16(R10), Y12
	VFMADD231PD Y8, Y12, Y4
	VFMADD231PD Y9, Y12, Y5
	VBROADCASTSD 24(R10), Y13
	VFMADD231PD Y8, Y13, Y6
	VFMADD231PD Y9, Y13, Y7
	ADDQ $32, R10
	ADDQ R8, R12
	DECQ R15
	JNZ rank4

	VMOVUPD Y0, 0(DI)(R9*1)
	VMOVUPD Y1, 32(DI)(R9*1)
	VMOVUPD Y2, 0(R13)(R9*1)
	VMOVUPD Y3, 32(R13)(R9*1)
	VMOVUPD Y4, 0(R14)(R9*1)
	VMOVUPD Y5, 32(R14)(R9*1)
	VMOVUPD Y6, 0(AX)(R9*1)
	VMOVUPD Y7, 32(AX)(R9*1)
	ADDQ $64, R9
	CMPQ R9, CX
	JLT block4
	VZEROUPPER
	RET
