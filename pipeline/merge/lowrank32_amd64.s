#include "textflag.h"

// GUARD writes the guard mask of one row and one block of 16 columns (see flag32Go): bit b of the 16-bit
// word at 0(R15) is set when lane b of A (columns 0-7) or B (8-15) has a magnitude below max(KU·nv, floor),
// compared as VCMPPS LT_OQ (a NaN is never flagged). Y8/Y9 = nv of the 16 columns, Y10 = 0x7FFFFFFF,
// Y11 = floor; Y12-Y14 and R10 are clobbered.
#define GUARD(A, B, KU) \
	VBROADCASTSS KU, Y12 \
	VMULPS Y8, Y12, Y13 \
	VMAXPS Y11, Y13, Y13 \
	VANDPS Y10, A, Y14 \
	VCMPPS $0x11, Y13, Y14, Y14 \
	VMOVMSKPS Y14, R10 \
	MOVB R10, 0(R15) \
	VMULPS Y9, Y12, Y13 \
	VMAXPS Y11, Y13, Y13 \
	VANDPS Y10, B, Y14 \
	VCMPPS $0x11, Y13, Y14, Y14 \
	VMOVMSKPS Y14, R10 \
	MOVB R10, 1(R15)

// ABSMASK sets Y10 to 0x7FFFFFFF in every lane (R10 clobbered).
#define ABSMASK \
	MOVL $0x7FFFFFFF, R10 \
	VMOVD R10, X10 \
	VPBROADCASTD X10, Y10

// func lowRank32x4AVX2(x *float32, ldx int, n int, ug *float32, r int, v *float32, ldv int, ku *float32, nv *float32, floor float32, mask *uint16, ldm int)
//
// Four rows of float32 at once: rows x, x+ldx, x+2·ldx, x+3·ldx; ug holds u of the four rows interleaved,
// ug[k*4+i]. For each block of 16 columns j and each row i: acc = x_i[j:j+16]; for k in 0..r-1:
// acc = float32(ug[k*4+i]·v[k*ldv+j : +16]) + acc, a rounded VMULPS then a rounded VADDPS, exactly as
// lowRank32Go. Each v vector is loaded once for the four rows. n is a multiple of 16, r >= 1.
// Then each block's guard mask goes to mask (row i's words ldm bytes after row i-1's), as flag32Go computes
// it from ku[i], nv[j:j+16] and floor.
TEXT ·lowRank32x4AVX2(SB), NOSPLIT, $0-96
	MOVQ x+0(FP), DI
	MOVQ ldx+8(FP), AX
	SHLQ $2, AX
	LEAQ (DI)(AX*1), R13
	LEAQ (DI)(AX*2), R14
	LEAQ (R13)(AX*2), AX
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	MOVQ ug+24(FP), SI
	MOVQ r+32(FP), BX
	MOVQ v+40(FP), DX
	MOVQ ldv+48(FP), R8
	SHLQ $2, R8
	XORQ R9, R9

block:
	VMOVUPS 0(DI)(R9*1), Y0
	VMOVUPS 32(DI)(R9*1), Y1
	VMOVUPS 0(R13)(R9*1), Y2
	VMOVUPS 32(R13)(R9*1), Y3
	VMOVUPS 0(R14)(R9*1), Y4
	VMOVUPS 32(R14)(R9*1), Y5
	VMOVUPS 0(AX)(R9*1), Y6
	VMOVUPS 32(AX)(R9*1), Y7
	MOVQ SI, R10
	LEAQ (DX)(R9*1), R12
	MOVQ BX, R15

rank:
	VMOVUPS 0(R12), Y8
	VMOVUPS 32(R12), Y9
	VBROADCASTSS 0(R10), Y10
	VMULPS Y8, Y10, Y11
	VMULPS Y9, Y10, Y12
	VADDPS Y11, Y0, Y0
	VADDPS Y12, Y1, Y1
	VBROADCASTSS 4(R10), Y13
	VMULPS Y8, Y13, Y14
	VMULPS Y9, Y13, Y15
	VADDPS Y14, Y2, Y2
	VADDPS Y15, Y3, Y3
	VBROADCASTSS 8(R10), Y10
	VMULPS Y8, Y10, Y11
	VMULPS Y9, Y10, Y12
	VADDPS Y11, Y4, Y4
	VADDPS Y12, Y5, Y5
	VBROADCASTSS 12(R10), Y13
	VMULPS Y8, Y13, Y14
	VMULPS Y9, Y13, Y15
	VADDPS Y14, Y6, Y6
	VADDPS Y15, Y7, Y7
	ADDQ $16, R10
	ADDQ R8, R12
	DECQ R15
	JNZ rank

	MOVQ nv+64(FP), R10
	VMOVUPS 0(R10)(R9*1), Y8
	VMOVUPS 32(R10)(R9*1), Y9
	ABSMASK
	VBROADCASTSS floor+72(FP), Y11
	MOVQ ku+56(FP), R12
	MOVQ R9, R15
	SHRQ $5, R15          // 64 float32 bytes per block, one uint16 word
	ADDQ mask+80(FP), R15
	GUARD(Y0, Y1, 0(R12))
	ADDQ ldm+88(FP), R15
	GUARD(Y2, Y3, 4(R12))
	ADDQ ldm+88(FP), R15
	GUARD(Y4, Y5, 8(R12))
	ADDQ ldm+88(FP), R15
	GUARD(Y6, Y7, 12(R12))

	VMOVUPS Y0, 0(DI)(R9*1)
	VMOVUPS Y1, 32(DI)(R9*1)
	VMOVUPS Y2, 0(R13)(R9*1)
	VMOVUPS Y3, 32(R13)(R9*1)
	VMOVUPS Y4, 0(R14)(R9*1)
	VMOVUPS Y5, 32(R14)(R9*1)
	VMOVUPS Y6, 0(AX)(R9*1)
	VMOVUPS Y7, 32(AX)(R9*1)
	ADDQ $64, R9
	CMPQ R9, CX
	JLT block
	VZEROUPPER
	RET

// func decodeBF16F32AVX2(dst *float32, src *byte, n int)
//
// Widens n bfloat16 values (n a multiple of 8, > 0) to float32: bits << 16.
TEXT ·decodeBF16F32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

dloop:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ dloop
	VZEROUPPER
	RET

// func encodeF32BF16AVX2(dst *byte, src *float32, n int) int
//
// Rounds float32 to bfloat16 (nearest even on the low 16 bits: (b + 0x7FFF + (b>>16 & 1)) >> 16) eight values
// at a time. It stops before the first group of eight holding a value that is, or rounds to, NaN/Inf (the
// scalar path reports it) and returns how many values it encoded.
TEXT ·encodeF32BF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
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

eloop:
	LEAQ 8(AX), R9
	CMPQ R9, CX
	JGT edone
	VMOVDQU (SI)(AX*4), Y0
	VPAND Y12, Y0, Y3
	VPCMPEQD Y12, Y3, Y3
	VPSRLD $16, Y0, Y4
	VPAND Y14, Y4, Y4
	VPADDD Y13, Y0, Y5
	VPADDD Y4, Y5, Y5
	VPSRLD $16, Y5, Y5
	VPAND Y15, Y5, Y6
	VPCMPEQD Y15, Y6, Y6
	VPOR Y6, Y3, Y3
	VPTEST Y3, Y3
	JNZ edone
	VEXTRACTI128 $1, Y5, X7
	VPACKUSDW X7, X5, X5
	VMOVDQU X5, (DI)(AX*2)
	MOVQ R9, AX
	JMP eloop

edone:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// ROUND16 rounds the float32 accumulator A (eight values) to bfloat16 in place (the low 16 bits of each
// dword: (b + 0x7FFF + (b>>16 & 1)) >> 16) and ORs into Y15 the lanes whose input or result is NaN/Inf.
// Y8 = 0x7FFF, Y9 = 1, Y10 = 0x7F800000, Y11 = 0x7F80; Y12-Y14 are clobbered.
#define ROUND16(A) \
	VPSRLD $16, A, Y12 \
	VPAND Y9, Y12, Y12 \
	VPAND Y10, A, Y14 \
	VPCMPEQD Y10, Y14, Y14 \
	VPOR Y14, Y15, Y15 \
	VPADDD Y8, A, Y13 \
	VPADDD Y12, Y13, Y13 \
	VPSRLD $16, Y13, A \
	VPAND Y11, A, Y14 \
	VPCMPEQD Y11, Y14, Y14 \
	VPOR Y14, Y15, Y15

// PACK16 packs the bfloat16 of A (columns 0-7) and B (8-15) into A, in column order.
#define PACK16(A, B) \
	VPACKUSDW B, A, A \
	VPERMQ $0xD8, A, A

// func fused4BF16AVX2(dst *byte, src *byte, ld int, n int, ug *float32, r int, v *float32, ldv int, ku *float32, nv *float32, floor float32, mask *uint16, ldm int) (bad int)
//
// decode16, lowRank32Go and encode16 in one pass over four bfloat16 rows of src (ld bytes apart) into the
// same rows of dst, for the first n columns (a multiple of 16): each value is widened to float32, gets
// float32(ug[k*4+i]·v[k*ldv+j]) added for k = 0 … r-1 in order (VMULPS then VADDPS, as lowRank32x4AVX2), and
// is rounded to bfloat16 as encodeF32BF16AVX2 does. Before the rounding each block's guard mask is written as
// lowRank32x4AVX2 writes it. bad is 1 when some value is, or rounds to, NaN/Inf (dst then holds garbage there
// and the caller redoes the rows on the scalar path), else 0.
TEXT ·fused4BF16AVX2(SB), NOSPLIT, $0-112
	MOVQ dst+0(FP), R14
	MOVQ src+8(FP), DI
	MOVQ ld+16(FP), R11
	LEAQ (DI)(R11*2), R13 // src row 2
	LEAQ (R14)(R11*2), AX // dst row 2
	MOVQ n+24(FP), CX
	SHLQ $1, CX           // n in bf16 bytes
	MOVQ ug+32(FP), SI
	MOVQ r+40(FP), BX
	MOVQ v+48(FP), DX
	MOVQ ldv+56(FP), R8
	SHLQ $2, R8
	XORQ R9, R9           // column offset in bf16 bytes
	VPXOR Y15, Y15, Y15

ftile:
	VPMOVZXWD 0(DI)(R9*1), Y0
	VPMOVZXWD 16(DI)(R9*1), Y1
	LEAQ (DI)(R11*1), R10
	VPMOVZXWD 0(R10)(R9*1), Y2
	VPMOVZXWD 16(R10)(R9*1), Y3
	VPMOVZXWD 0(R13)(R9*1), Y4
	VPMOVZXWD 16(R13)(R9*1), Y5
	LEAQ (R13)(R11*1), R10
	VPMOVZXWD 0(R10)(R9*1), Y6
	VPMOVZXWD 16(R10)(R9*1), Y7
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VPSLLD $16, Y2, Y2
	VPSLLD $16, Y3, Y3
	VPSLLD $16, Y4, Y4
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	VPSLLD $16, Y7, Y7
	MOVQ SI, R10
	LEAQ (DX)(R9*2), R12
	MOVQ BX, R15

frank:
	VMOVUPS 0(R12), Y8
	VMOVUPS 32(R12), Y9
	VBROADCASTSS 0(R10), Y10
	VMULPS Y8, Y10, Y11
	VMULPS Y9, Y10, Y12
	VADDPS Y11, Y0, Y0
	VADDPS Y12, Y1, Y1
	VBROADCASTSS 4(R10), Y13
	VMULPS Y8, Y13, Y14
	VMULPS Y9, Y13, Y11
	VADDPS Y14, Y2, Y2
	VADDPS Y11, Y3, Y3
	VBROADCASTSS 8(R10), Y10
	VMULPS Y8, Y10, Y12
	VMULPS Y9, Y10, Y14
	VADDPS Y12, Y4, Y4
	VADDPS Y14, Y5, Y5
	VBROADCASTSS 12(R10), Y13
	VMULPS Y8, Y13, Y11
	VMULPS Y9, Y13, Y12
	VADDPS Y11, Y6, Y6
	VADDPS Y12, Y7, Y7
	ADDQ $16, R10
	ADDQ R8, R12
	DECQ R15
	JNZ frank

	MOVQ nv+72(FP), R10
	VMOVUPS 0(R10)(R9*2), Y8
	VMOVUPS 32(R10)(R9*2), Y9
	ABSMASK
	VBROADCASTSS floor+80(FP), Y11
	MOVQ ku+64(FP), R12
	MOVQ R9, R15
	SHRQ $4, R15          // 32 bfloat16 bytes per block, one uint16 word
	ADDQ mask+88(FP), R15
	GUARD(Y0, Y1, 0(R12))
	ADDQ ldm+96(FP), R15
	GUARD(Y2, Y3, 4(R12))
	ADDQ ldm+96(FP), R15
	GUARD(Y4, Y5, 8(R12))
	ADDQ ldm+96(FP), R15
	GUARD(Y6, Y7, 12(R12))

	MOVL $0x7FFF, R10
	VMOVD R10, X8
	VPBROADCASTD X8, Y8
	MOVL $1, R10
	VMOVD R10, X9
	VPBROADCASTD X9, Y9
	MOVL $0x7F800000, R10
	VMOVD R10, X10
	VPBROADCASTD X10, Y10
	MOVL $0x7F80, R10
	VMOVD R10, X11
	VPBROADCASTD X11, Y11
	ROUND16(Y0)
	ROUND16(Y1)
	ROUND16(Y2)
	ROUND16(Y3)
	ROUND16(Y4)
	ROUND16(Y5)
	ROUND16(Y6)
	ROUND16(Y7)
	PACK16(Y0, Y1)
	PACK16(Y2, Y3)
	PACK16(Y4, Y5)
	PACK16(Y6, Y7)
	VMOVDQU Y0, 0(R14)(R9*1)
	LEAQ (R14)(R11*1), R10
	VMOVDQU Y2, 0(R10)(R9*1)
	VMOVDQU Y4, 0(AX)(R9*1)
	LEAQ (AX)(R11*1), R10
	VMOVDQU Y6, 0(R10)(R9*1)
	ADDQ $32, R9
	CMPQ R9, CX
	JLT ftile

	XORQ R10, R10
	VPTEST Y15, Y15
	SETNE R10B
	MOVQ R10, bad+104(FP)
	VZEROUPPER
	RET
