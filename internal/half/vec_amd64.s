//go:build !purego

#include "textflag.h"

// func decodeF16AVX(dst *float32, src *byte, n int)
//
// n (a positive multiple of 8) f16 values to float32 with VCVTPH2PS, which
// is exact for every f16, subnormals included, and quiets a signalling NaN
// as f16ToF32Bits does (TestF16ToF32Golden covers all 65536 values).
TEXT ·decodeF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	CMPQ CX, $32
	JLT  tail8

loop32:
	VCVTPH2PS (SI)(AX*2), Y0
	VCVTPH2PS 16(SI)(AX*2), Y1
	VCVTPH2PS 32(SI)(AX*2), Y2
	VCVTPH2PS 48(SI)(AX*2), Y3
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	VMOVUPS   Y2, 64(DI)(AX*4)
	VMOVUPS   Y3, 96(DI)(AX*4)
	ADDQ      $32, AX
	LEAQ      32(AX), BX
	CMPQ      BX, CX
	JLE       loop32

tail8:
	CMPQ AX, CX
	JGE  done
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       tail8

done:
	VZEROUPPER
	RET

// func decodeBF16AVX(dst *float32, src *byte, n int)
//
// n (a positive multiple of 8) bf16 values to float32: bits << 16.
TEXT ·decodeBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

bloop:
	VPMOVZXWD (SI)(AX*2), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JLT       bloop
	VZEROUPPER
	RET

// func encodeF16AVX(dst *byte, src *float32, n int) int
//
// Rounds float32 to f16 eight at a time with VCVTPS2PH (round to nearest
// even, subnormals kept, overflow to Inf: f32BitsToF16 for every non-NaN
// value). It stops before the first group of eight holding a NaN, whose
// f16 ggml fixes to 0x7E00 with the sign, and returns how many values it
// converted (a multiple of 8 up to n).
TEXT ·encodeF16AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

eloop:
	LEAQ      8(AX), BX
	CMPQ      BX, CX
	JGT       edone
	VMOVUPS   (SI)(AX*4), Y0
	VCMPPS    $0x03, Y0, Y0, Y1 // unordered: NaN
	VMOVMSKPS Y1, DX
	TESTL     DX, DX
	JNZ       edone
	VCVTPS2PH $0, Y0, (DI)(AX*2)
	MOVQ      BX, AX
	JMP       eloop

edone:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

DATA bfOne<>+0(SB)/4, $1
GLOBL bfOne<>(SB), RODATA|NOPTR, $4
DATA bfRound<>+0(SB)/4, $0x7FFF
GLOBL bfRound<>(SB), RODATA|NOPTR, $4
DATA bfAbs<>+0(SB)/4, $0x7FFFFFFF
GLOBL bfAbs<>(SB), RODATA|NOPTR, $4
DATA bfInf<>+0(SB)/4, $0x7F800000
GLOBL bfInf<>(SB), RODATA|NOPTR, $4
DATA bfQuiet<>+0(SB)/4, $0x40
GLOBL bfQuiet<>(SB), RODATA|NOPTR, $4

// func encodeBF16AVX(dst *byte, src *float32, n int)
//
// n (a positive multiple of 8) float32 values to bf16 as F32ToBF16 rounds
// them: (bits + 0x7FFF + ((bits>>16)&1)) >> 16, and for a NaN
// (bits>>16) | 0x0040.
TEXT ·encodeBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	VPBROADCASTD bfOne<>(SB), Y15
	VPBROADCASTD bfRound<>(SB), Y14
	VPBROADCASTD bfAbs<>(SB), Y13
	VPBROADCASTD bfInf<>(SB), Y12
	VPBROADCASTD bfQuiet<>(SB), Y11

bfloop:
	VMOVDQU      (SI)(AX*4), Y0
	VPSRLD       $16, Y0, Y1
	VPAND        Y15, Y1, Y2
	VPADDD       Y0, Y2, Y2
	VPADDD       Y14, Y2, Y2
	VPSRLD       $16, Y2, Y2
	VPAND        Y13, Y0, Y3
	VPCMPGTD     Y12, Y3, Y3      // NaN: |bits| > 0x7F800000
	VPOR         Y11, Y1, Y4
	VPBLENDVB    Y3, Y4, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPACKUSDW    X3, X2, X2
	VMOVDQU      X2, (DI)(AX*2)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          bfloop
	VZEROUPPER
	RET
