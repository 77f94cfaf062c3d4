package std

// Default lists the modules `iii up` starts, in start order. Each module's
// package is blank-imported here so that its init registers it.
var Default = []string{}
