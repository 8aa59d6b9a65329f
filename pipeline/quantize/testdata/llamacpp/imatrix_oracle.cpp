// imatrix_oracle: llama.cpp's own importance-matrix loader and quantizer, for phonellm's interop tests
// (pipeline/quantize/upstream_imatrix_test.go builds it against the llama.cpp release that node-llama-cpp ships:
// headers from its llama/gitRelease.bundle, libraries from @node-llama-cpp/linux-x64).
//
//   imatrix_oracle load FILE
//       common_imatrix_load(FILE), then the per-column values tools/quantize/quantize.cpp's load_imatrix derives
//       from it. Prints "meta LEGACY HAS_METADATA CHUNK_COUNT CHUNK_SIZE N_DATASETS", one "dataset NAME" line
//       per dataset, then per entry "entry NAME N_VALUES COUNT..." and "values HEX..." (float32 bit patterns).
//   imatrix_oracle quantize IN OUT FTYPE [IMATRIX]
//       llama_model_quantize(IN, OUT) to llama_ftype FTYPE on one thread, with the importance values and the
//       quantize.imatrix.* keys tools/quantize/quantize.cpp passes (written here from its description).
//   imatrix_oracle rewrite IN OUT
//       common_imatrix_load(IN), then OUT written with the gguf calls of tools/imatrix/imatrix.cpp's
//       IMatrixCollector::save_imatrix (general.type, imatrix.datasets, imatrix.chunk_count,
//       imatrix.chunk_size, then NAME.in_sum2 [n_per_row, n_mat] and NAME.counts [1, n_mat] in name order).
//   imatrix_oracle chunk GGML_TYPE NROWS N_PER_ROW IN.f32 IMATRIX.f32|- OUT.bin
//       ggml_quantize_init + ggml_quantize_chunk of NROWS rows, with one importance vector or none.
//
// The loader arithmetic below (in_sum2 / count per matrix, 1 where the count is 0; sums / ncall for the legacy
// format) is quantize.cpp's load_imatrix, which lives in the tool, not in a library.

#include "ggml.h"
#include "gguf.h"
#include "imatrix-loader.h"
#include "llama.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

static bool importance(const std::string & file, common_imatrix & loaded, std::map<std::string, std::vector<float>> & out) {
    if (!common_imatrix_load(file, loaded)) {
        fprintf(stderr, "common_imatrix_load failed for %s\n", file.c_str());
        return false;
    }
    if (!loaded.is_legacy && !loaded.has_metadata) {
        fprintf(stderr, "missing imatrix metadata in %s\n", file.c_str());
        return false;
    }
    for (const auto & [name, entry] : loaded.entries) {
        auto & e = out[name];
        e.resize(entry.sums.size());
        if (!loaded.is_legacy) {
            const int64_t ncounts = entry.counts.size();
            const int64_t ne0 = ncounts > 0 ? (int64_t) entry.sums.size() / ncounts : 0;
            for (int64_t j = 0; j < ncounts; ++j) {
                const float count = (float) entry.counts[j];
                for (int64_t i = 0; i < ne0; ++i) {
                    e[j*ne0 + i] = count > 0.0f ? entry.sums[j*ne0 + i] / count : 1;
                }
            }
        } else {
            const int64_t ncall = entry.counts.empty() ? 0 : entry.counts[0];
            for (size_t i = 0; i < entry.sums.size(); ++i) {
                e[i] = ncall > 0 ? entry.sums[i] / ncall : entry.sums[i];
            }
        }
    }
    return true;
}

static int cmd_load(const char * file) {
    common_imatrix loaded;
    std::map<std::string, std::vector<float>> values;
    if (!importance(file, loaded, values)) {
        return 1;
    }
    printf("meta %d %d %d %d %zu\n", loaded.is_legacy ? 1 : 0, loaded.has_metadata ? 1 : 0, loaded.chunk_count,
           loaded.chunk_size, loaded.datasets.size());
    for (const auto & d : loaded.datasets) {
        printf("dataset %s\n", d.c_str());
    }
    for (const auto & [name, v] : values) {
        const auto & entry = loaded.entries.at(name);
        printf("entry %s %zu", name.c_str(), v.size());
        for (int64_t c : entry.counts) {
            printf(" %lld", (long long) c);
        }
        printf("\nvalues");
        for (float x : v) {
            uint32_t bits;
            memcpy(&bits, &x, sizeof bits);
            printf(" %08x", bits);
        }
        printf("\n");
    }
    return 0;
}

static llama_model_kv_override kv_str(const char * key, const std::string & val) {
    llama_model_kv_override kvo{};
    strncpy(kvo.key, key, sizeof(kvo.key) - 1);
    kvo.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
    strncpy(kvo.val_str, val.c_str(), 127);
    kvo.val_str[127] = '\0';
    return kvo;
}

static llama_model_kv_override kv_int(const char * key, int64_t val) {
    llama_model_kv_override kvo{};
    strncpy(kvo.key, key, sizeof(kvo.key) - 1);
    kvo.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    kvo.val_i64 = val;
    return kvo;
}

static int cmd_quantize(const char * in, const char * out, int ftype, const char * imatrix_file) {
    llama_model_quantize_params params = llama_model_quantize_default_params();
    params.nthread = 1;
    params.ftype = (enum llama_ftype) ftype;

    common_imatrix loaded;
    std::map<std::string, std::vector<float>> values;
    std::vector<llama_model_imatrix_data> data;
    std::vector<llama_model_kv_override> kv;
    if (imatrix_file != nullptr) {
        if (!importance(imatrix_file, loaded, values)) {
            return 1;
        }
        for (const auto & [name, v] : values) {
            data.push_back({name.c_str(), v.data(), v.size()});
        }
        data.push_back({nullptr, nullptr, 0});
        params.imatrix = data.data();
        kv.push_back(kv_str("quantize.imatrix.file", imatrix_file));
        if (!loaded.datasets.empty()) {
            kv.push_back(kv_str("quantize.imatrix.dataset", loaded.datasets[0]));
        }
        kv.push_back(kv_int("quantize.imatrix.entries_count", (int64_t) values.size()));
        if (loaded.chunk_count > 0) {
            kv.push_back(kv_int("quantize.imatrix.chunks_count", loaded.chunk_count));
        }
        kv.emplace_back();
        kv.back().key[0] = 0;
        params.kv_overrides = kv.data();
    }
    llama_backend_init();
    const uint32_t rc = llama_model_quantize(in, out, &params);
    llama_backend_free();
    if (rc != 0) {
        fprintf(stderr, "llama_model_quantize failed: %u\n", rc);
        return 1;
    }
    return 0;
}

static int cmd_rewrite(const char * in, const char * out) {
    common_imatrix loaded;
    if (!common_imatrix_load(in, loaded)) {
        fprintf(stderr, "common_imatrix_load failed for %s\n", in);
        return 1;
    }
    size_t data_size = 0;
    for (const auto & [name, e] : loaded.entries) {
        data_size += GGML_PAD(ggml_tensor_overhead() + sizeof(float) * e.sums.size(), GGML_MEM_ALIGN);
        data_size += GGML_PAD(ggml_tensor_overhead() + sizeof(float) * e.counts.size(), GGML_MEM_ALIGN);
    }
    struct ggml_init_params params = { data_size, nullptr, false };
    struct ggml_context * ctx = ggml_init(params);
    struct gguf_context * ctx_gguf = gguf_init_empty();
    std::vector<const char *> datasets;
    for (const auto & d : loaded.datasets) {
        datasets.push_back(d.c_str());
    }
    gguf_set_val_str(ctx_gguf, "general.type", "imatrix");
    gguf_set_arr_str(ctx_gguf, LLM_KV_IMATRIX_DATASETS, datasets.data(), datasets.size());
    gguf_set_val_u32(ctx_gguf, LLM_KV_IMATRIX_CHUNK_COUNT, loaded.chunk_count);
    gguf_set_val_u32(ctx_gguf, LLM_KV_IMATRIX_CHUNK_SIZE, loaded.chunk_size);
    for (const auto & [name, e] : loaded.entries) { // std::map: name order
        const int64_t nval = e.sums.size(), nmat = e.counts.size();
        if (nval == 0 || nmat == 0) {
            continue;
        }
        struct ggml_tensor * in_sum2 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nval / nmat, nmat);
        struct ggml_tensor * counts  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, nmat);
        ggml_format_name(in_sum2, "%s.in_sum2", name.c_str());
        ggml_format_name(counts, "%s.counts", name.c_str());
        for (int64_t j = 0; j < nval; ++j) {
            ((float *) in_sum2->data)[j] = e.sums[j];
        }
        for (int64_t j = 0; j < nmat; ++j) {
            ((float *) counts->data)[j] = (float) e.counts[j];
        }
        gguf_add_tensor(ctx_gguf, in_sum2);
        gguf_add_tensor(ctx_gguf, counts);
    }
    const bool ok = gguf_write_to_file(ctx_gguf, out, false);
    gguf_free(ctx_gguf);
    ggml_free(ctx);
    return ok ? 0 : 1;
}

static std::vector<float> read_f32(const char * path, size_t n) {
    std::vector<float> v(n);
    FILE * f = fopen(path, "rb");
    if (f == nullptr || fread(v.data(), sizeof(float), n, f) != n) {
        fprintf(stderr, "cannot read %zu floats from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return v;
}

static int cmd_chunk(int type, int64_t nrows, int64_t n_per_row, const char * in, const char * imatrix, const char * out) {
    const std::vector<float> src = read_f32(in, nrows * n_per_row);
    std::vector<float> weights;
    if (strcmp(imatrix, "-") != 0) {
        weights = read_f32(imatrix, n_per_row);
    }
    ggml_quantize_init((enum ggml_type) type);
    std::vector<uint8_t> dst(ggml_row_size((enum ggml_type) type, n_per_row) * nrows);
    const size_t n = ggml_quantize_chunk((enum ggml_type) type, src.data(), dst.data(), 0, nrows, n_per_row,
                                         weights.empty() ? nullptr : weights.data());
    FILE * f = fopen(out, "wb");
    if (f == nullptr || fwrite(dst.data(), 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", out);
        return 1;
    }
    return 0;
}

int main(int argc, char ** argv) {
    if (argc == 4 && strcmp(argv[1], "rewrite") == 0) {
        return cmd_rewrite(argv[2], argv[3]);
    }
    if (argc == 8 && strcmp(argv[1], "chunk") == 0) {
        return cmd_chunk(atoi(argv[2]), atoll(argv[3]), atoll(argv[4]), argv[5], argv[6], argv[7]);
    }
    if (argc == 3 && strcmp(argv[1], "load") == 0) {
        return cmd_load(argv[2]);
    }
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "quantize") == 0) {
        return cmd_quantize(argv[2], argv[3], atoi(argv[4]), argc == 6 ? argv[5] : nullptr);
    }
    fprintf(stderr, "usage: imatrix_oracle load FILE | quantize IN OUT FTYPE [IMATRIX] | rewrite IN OUT | chunk TYPE NROWS N_PER_ROW IN IMATRIX OUT\n");
    return 2;
}
