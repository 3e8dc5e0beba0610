"""The trace model: filters, call trees and time steps, NLR loops, event windows, global ids."""
