//! rotor-drainer: drains nodes that carry the drain taint. (Work starts in issue 4.)
