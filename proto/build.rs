//! Generates the chorus.v1 gRPC code with protox (a pure-Rust .proto compiler),
//! so building Chorus needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "chorus/v1/worker.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
