"""The simulator: a synthetic visitor population that sends beacons like real browsers would (`tally traffic`)."""
