/* Copyright © 2023-2024 Apple Inc. */

#ifndef MLX_HALF_H
#define MLX_HALF_H

/* mlx-sys (vendored): without native ARM half types, mlx-c's C++ uses MLX's
 * own 2-byte software types; included outside the extern "C" block below. */
#if !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) && \
    !defined(__aarch64__) && defined(__cplusplus)
#include "mlx/types/half_types.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) || defined(__aarch64__)
#define HAS_FLOAT16
#include <arm_fp16.h>
typedef __fp16 float16_t;
#endif

/* mlx-sys (vendored): LLVM's clang before 15 knows __bf16 on AArch64 only
 * with the bf16 extension, so bindgen there (Debian 12, Ubuntu 22.04) sees
 * bfloat16_t as the 2-byte uint16_t it is on x86-64 below; the ABI agrees. */
#if defined(__aarch64__) && !defined(__ARM_FEATURE_BF16) && \
    defined(__clang__) && !defined(__apple_build_version__) && \
    !defined(__cplusplus) && __clang_major__ < 15
#include <stdint.h>
#define HAS_BFLOAT16
typedef uint16_t bfloat16_t;
#elif defined(__ARM_FEATURE_BF16) || defined(__aarch64__)
#define HAS_BFLOAT16
#include <arm_bf16.h>
typedef __bf16 bfloat16_t;
#endif

/* mlx-sys (vendored): the same API on other targets (x86-64 Linux), which
 * mlx-rs needs. Both types are 2-byte PODs passed by pointer, so C++ (mlx-c)
 * and C (bindgen, through clang) agree on the ABI. clang accepts __fp16 as a
 * storage-only type everywhere; bindgen maps it to a u16 newtype, as on ARM. */
#if !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) && !defined(__aarch64__)
#if defined(__cplusplus)
#define HAS_FLOAT16
#define HAS_BFLOAT16
typedef mlx::core::float16_t float16_t;
typedef mlx::core::bfloat16_t bfloat16_t;
#elif defined(__clang__)
#include <stdint.h>
#define HAS_FLOAT16
#define HAS_BFLOAT16
typedef __fp16 float16_t;
typedef uint16_t bfloat16_t;
#endif
#endif

#ifdef __cplusplus
}
#endif

#endif
