//! S3Gen flow: speech tokens to mel (filled in by the S3Gen work).
