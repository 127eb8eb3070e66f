"""The gateway's configuration: one frozen Settings, its flags and variables, its checks, and the sampling
defaults a request gets.
"""
