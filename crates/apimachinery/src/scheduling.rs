//! Pod priority facts shared by rotor (which picks the surge placeholders' priority) and the
//! simulator (which admits, schedules and autoscales by it).

/// The PriorityClasses every apiserver has without anyone creating them, with their values.
pub const BUILT_IN_PRIORITY_CLASSES: [(&str, i32); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

/// cluster-autoscaler's default `--expendable-pods-priority-cutoff`: it adds no node for a
/// pending pod whose priority is below it.
pub const AUTOSCALER_EXPENDABLE_CUTOFF: i32 = -10;
