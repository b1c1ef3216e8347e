pub mod error;
pub mod tokenizer;
pub mod cache;
pub mod config;
pub mod models;
pub mod weights;
pub mod generate;
pub mod sampling;
