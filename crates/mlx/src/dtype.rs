/// MLX dtypes, numbered as MLX's own `Dtype::Val` so codes cross the FFI unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Dtype {
    Bool = 0,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Float16,
    Float32,
    Float64,
    Bfloat16,
    Complex64,
}

impl Dtype {
    pub fn from_code(code: i32) -> Option<Dtype> {
        use Dtype::*;
        const ALL: [Dtype; 14] = [Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Float16, Float32, Float64, Bfloat16, Complex64];
        ALL.get(usize::try_from(code).ok()?).copied()
    }

    pub fn size(self) -> usize {
        use Dtype::*;
        match self {
            Bool | Uint8 | Int8 => 1,
            Uint16 | Int16 | Float16 | Bfloat16 => 2,
            Uint32 | Int32 | Float32 => 4,
            Uint64 | Int64 | Float64 | Complex64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Dtype::Float16 | Dtype::Float32 | Dtype::Float64 | Dtype::Bfloat16)
    }

    /// The names MLX and safetensors configs use ("float32", "bfloat16", ...).
    pub fn name(self) -> &'static str {
        use Dtype::*;
        match self {
            Bool => "bool",
            Uint8 => "uint8",
            Uint16 => "uint16",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Int8 => "int8",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            Float16 => "float16",
            Float32 => "float32",
            Float64 => "float64",
            Bfloat16 => "bfloat16",
            Complex64 => "complex64",
        }
    }

    pub fn from_name(name: &str) -> Option<Dtype> {
        use Dtype::*;
        Some(match name {
            "bool" => Bool,
            "uint8" => Uint8,
            "uint16" => Uint16,
            "uint32" => Uint32,
            "uint64" => Uint64,
            "int8" => Int8,
            "int16" => Int16,
            "int32" => Int32,
            "int64" => Int64,
            "float16" => Float16,
            "float32" => Float32,
            "float64" => Float64,
            "bfloat16" => Bfloat16,
            "complex64" => Complex64,
            _ => return None,
        })
    }
}

/// Rust element types that can be copied in and out of arrays.
///
/// # Safety
/// `size_of::<Self>()` must equal `DTYPE.size()`, and every bit pattern MLX
/// writes for `DTYPE` must be a valid `Self`: `Array::from_slice` and `to_vec`
/// copy raw bytes on that promise.
pub unsafe trait Element: Copy + Default + 'static {
    const DTYPE: Dtype;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        // SAFETY: `$t` is the Rust type of MLX's `$d`: same size, any bits valid.
        unsafe impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
        }
    };
}
element!(bool, Bool);
element!(u8, Uint8);
element!(u16, Uint16);
element!(u32, Uint32);
element!(u64, Uint64);
element!(i8, Int8);
element!(i16, Int16);
element!(i32, Int32);
element!(i64, Int64);
element!(f32, Float32);
element!(f64, Float64);
