//! Raw bytes into the pickle VM (strict and scan mode, both persistent-id styles), then the
//! selection and metadata conversion that walk its output. Must never panic, hang or blow up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_pickle::select::select;
use weightport_pickle::vm::{PidStyle, Vm, VmLimits};

fuzz_target!(|data: &[u8]| {
    let limits = VmLimits {
        max_opcodes: 1 << 20,
        max_expanded: 1 << 16,
        ..VmLimits::default()
    };
    for (pid, scan) in [
        (PidStyle::Zip, false),
        (PidStyle::Legacy, false),
        (PidStyle::Zip, true),
    ] {
        if let Ok(p) = Vm::new(data, limits.clone(), pid, scan).run(scan) {
            let _ = select(&p.arena, p.root, None, None, &limits);
            let _ = select(&p.arena, p.root, Some("state_dict.a"), None, &limits);
        }
    }
});
