// Kubernetes resource quantities ("500m", "16Gi", "1e3", "1k"), enough to compare what we sent
// with what a server stored after canonicalising it.
#pragma once

#include <optional>
#include <string_view>

namespace topodra::kube {

// The value of a quantity, or nullopt when the text is not one.
std::optional<long double> ParseQuantity(std::string_view s);
bool QuantitiesEqual(std::string_view a, std::string_view b);

}  // namespace topodra::kube
