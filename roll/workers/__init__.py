"""Worker roles, one file each (Ray actor classes, created by roll.distributed.cluster.Cluster):
actor (policy training), inference (generation), reference, critic, reward, environment."""
