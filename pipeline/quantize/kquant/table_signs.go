package kquant

// Sign tables shared by the IQ2 and IQ3 formats.
//
// Format constants transcribed from llama.cpp commit
// 34af94cd9ab277632e27caeec2d41de2fd091b31 (ggml 0.20.1):
// ggml/src/ggml-common.h (the grids the dequantizers index) and
// ggml/src/ggml-quants.c (the packed grids that iq2xs_init_impl and
// iq3xs_init_impl expand for the quantizers). They are data, not code;
// tables_test.go checks them against each other and against the sha256 of
// the source tables.

// kmaskIQ2XS is kmask_iq2xs (ggml-common.h).
var kmaskIQ2XS = [8]uint8{
	1, 2, 4, 8, 16, 32, 64, 128,
}

// ksignsIQ2XS is ksigns_iq2xs (ggml-common.h).
var ksignsIQ2XS = [128]uint8{
	0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15,
	144, 17, 18, 147, 20, 149, 150, 23, 24, 153, 154, 27, 156, 29, 30, 159,
	160, 33, 34, 163, 36, 165, 166, 39, 40, 169, 170, 43, 172, 45, 46, 175,
	48, 177, 178, 51, 180, 53, 54, 183, 184, 57, 58, 187, 60, 189, 190, 63,
	192, 65, 66, 195, 68, 197, 198, 71, 72, 201, 202, 75, 204, 77, 78, 207,
	80, 209, 210, 83, 212, 85, 86, 215, 216, 89, 90, 219, 92, 221, 222, 95,
	96, 225, 226, 99, 228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111,
	240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
}
