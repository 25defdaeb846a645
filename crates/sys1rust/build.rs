// The binary needs the same run-time search path for libmlx as laya-mlx's tests.
include!("../laya-mlx/build.rs");
